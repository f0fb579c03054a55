// HttpResult (see http_stack.h): what every HTTP stack's answer carries.
#include "device/http/http_stack.h"

#include "util/utf8.h"

namespace tlr {

void HttpResult::AddHeader(std::string_view name, std::string value) {
  headers.emplace_back(AsciiLower(name), std::move(value));
}

std::string HttpResult::Header(const std::string& name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return "";
}

}  // namespace tlr
