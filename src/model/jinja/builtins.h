// Built-ins of the Jinja interpreter for chat templates (model layer, see template.h): attribute
// and item access, iteration, the filters, tests, string/dict methods and global functions
// that chat templates use, each with the Python/Jinja semantics Hugging Face renders with.
// Anything else is an Error naming it ("unsupported filter 'xyz'"), never a different result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/jinja/value.h"

namespace tlr::jinja {

// Throws the interpreter's Error with the template line.
[[noreturn]] void Fail(const std::string& msg, int line);
// An Error naming the value when it is undefined ("'x' is undefined").
void NoUndefined(const Value& v, int line);

Value GetAttr(const Value& obj, const std::string& name, int line);
Value GetItem(const Value& obj, const Value& key, int line);
// Python slicing obj[start:stop:step] of a list or string (undefined/none parts omitted).
Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line);
// The items a for loop visits: list elements, dict keys, string characters; undefined: none.
// Every call spends its items (a string: its bytes) from the render's budget of
// kMaxIteratedItems, so no template makes millions of values; over it, an Error.
std::vector<Value> Iterate(const Value& v, int line);
inline constexpr int64_t kMaxIteratedItems = 2'000'000;
// A fresh budget for the render starting on this thread (Template::Render).
void ResetIterationBudget();
// Strings and lists a template builds are bounded too (join, replace, ~, +, *): past these
// sizes an Error, checked before the memory is taken where the size is known in advance.
inline constexpr size_t kMaxStringBytes = size_t{16} << 20;
inline constexpr size_t kMaxListItems = 2'000'000;
void CheckStringSize(size_t bytes, int line);
// Every string those build counts against a per-render total (reset with the iteration
// budget), so a loop cannot build 16 MiB strings hundreds of thousands of times.
inline constexpr int64_t kMaxBuiltBytes = int64_t{64} << 20;
void SpendBytes(size_t bytes, int line);
void CheckListSize(size_t items, int line);
// Every list a template builds (+, *, slicing) spends its items from the iteration budget
// too: a loop that grows a list by `a = a + [x]` copies it whole each time (quadratic), and
// would otherwise stay under every other bound for minutes.
void SpendItems(size_t items, int line);
bool Contains(const Value& container, const Value& item, int line);

Value CallFilter(const std::string& name, const Value& input, const CallArgs& args, int line);
bool CallTest(const std::string& name, const Value& input, const CallArgs& args, int line);
// obj.name(args) for the string, dict and namespace methods templates use.
Value CallMethod(const Value& obj, const std::string& name, const CallArgs& args, int line);

// range, namespace, dict, raise_exception.
Dict DefaultGlobals();

}  // namespace tlr::jinja
