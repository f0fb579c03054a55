// Status and Expected<T>: how every TLR library function reports failure.
//
// Library code never throws across its API and never exits; it returns a Status (or an
// Expected<T> carrying either a value or a Status) whose message a user can act on. Only
// the apps layer decides to print and exit. Sits at the bottom of the layers (util).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace tlr {

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK.
  static Status Ok() { return Status(); }
  static Status Error(std::string message) {
    Status s;
    s.message_ = std::move(message);
    s.ok_ = false;
    return s;
  }
  bool ok() const { return ok_; }
  const std::string& message() const { return message_; }
  // Returns a copy whose message is "prefix: message" (for adding context on the way up).
  Status WithPrefix(const std::string& prefix) const {
    return ok_ ? *this : Error(prefix + ": " + message_);
  }

 private:
  bool ok_ = true;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design.
  Expected(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "Expected<T> built from an OK status has no value");
    if (status_.ok()) status_ = Status::Error("internal error: empty value");
  }
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace tlr

#define TLR_CONCAT_INNER(a, b) a##b
#define TLR_CONCAT(a, b) TLR_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the current function when it is an error.
#define TLR_RETURN_IF_ERROR(expr)                  \
  do {                                             \
    ::tlr::Status tlr_status_ = (expr);            \
    if (!tlr_status_.ok()) return tlr_status_;     \
  } while (0)

// `TLR_ASSIGN_OR_RETURN(auto x, F());` declares x from an Expected or returns its error.
#define TLR_ASSIGN_OR_RETURN(lhs, expr) \
  TLR_ASSIGN_OR_RETURN_IMPL(TLR_CONCAT(tlr_expected_, __LINE__), lhs, expr)
#define TLR_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
