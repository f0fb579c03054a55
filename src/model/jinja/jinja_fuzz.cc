// libFuzzer target for the chat-template interpreter (model layer, fuzz label): the input is
// a template (from a GGUF file, so untrusted), parsed and rendered over a small conversation.
// Checks: no crash, no hang (loops, output and recursion are bounded), errors are Status.
#include <cstdint>
#include <string>

#include "model/jinja/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tlr::jinja::Dict;
  using tlr::jinja::Value;
  auto t = tlr::jinja::Template::Parse(std::string(reinterpret_cast<const char*>(data), size));
  if (!t.ok()) return 0;
  Dict sys, user;
  sys.Set("role", Value("system"));
  sys.Set("content", Value(" be brief \n"));
  user.Set("role", Value("user"));
  user.Set("content", Value("<think>a</think>\nb \xc3\xa9 \xff"));
  Dict vars;
  vars.Set("messages", Value::List({Value::MakeDict(sys), Value::MakeDict(user)}));
  vars.Set("add_generation_prompt", Value(true));
  vars.Set("bos_token", Value("<s>"));
  auto out = t->Render(vars);
  (void)out;
  return 0;
}
