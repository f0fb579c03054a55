// A Jinja interpreter for the subset chat templates use (model layer; chat_template.h applies
// it to conversations). It renders like Hugging Face's apply_chat_template, which runs Python
// Jinja2 with trim_blocks and lstrip_blocks on and the loopcontrols extension:
//   - {{ }}, {% if/elif/else %}, {% for %} (unpacking, `if` filter, else, loop.index/index0/
//     revindex/revindex0/first/last/length/previtem/nextitem, break/continue), {% set %}
//     (also namespace attributes and {% set x %}...{% endset %}), {% macro %}, {% generation %},
//     whitespace control, comments;
//   - Python values and operators (+ - * / // % ** ~, comparisons, in / not in, and/or/not,
//     a if c else b), attribute/index access, slices ([::-1]), string and dict methods;
//   - the filters, tests and globals listed in builtins.cc (namespace, range, raise_exception;
//     callers add more, e.g. strftime_now).
// Anything else fails with an error naming it and its line ("unsupported filter 'xyz' at line
// 3"): a template is rendered exactly or not at all. Loops, output and macro recursion are
// bounded, so a hostile template cannot hang or exhaust memory.
//
// Thread-safety: a parsed Template is immutable; Render may run concurrently.
#pragma once

#include <memory>
#include <string>

#include "model/jinja/value.h"
#include "util/status.h"

namespace tlr::jinja {

struct Stmt;

class Template {
 public:
  // Parses template text; errors name the construct and its line.
  static Expected<Template> Parse(const std::string& source);
  // Renders with these variables (on top of the built-in globals).
  Expected<std::string> Render(const Dict& variables) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

}  // namespace tlr::jinja
