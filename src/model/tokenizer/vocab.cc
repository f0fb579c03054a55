// Vocab loading and saving: GGUF tokenizer.ggml.* metadata and Hugging Face tokenizer.json
// (model layer). See vocab.h.
#include "model/tokenizer/vocab.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "model/gguf/gguf_keys.h"
#include "model/gguf/gguf_reader.h"
#include "model/gguf/gguf_writer.h"
#include "model/tokenizer/hf_json_reader.h"
#include "model/tokenizer/pretokenize.h"
#include "util/mapped_file.h"

namespace tlr {

Status Vocab::Validate() const {
  const size_t n = tokens.size();
  if (n == 0) return Status::Error("vocabulary is empty");
  if (n > (1u << 24)) return Status::Error("vocabulary of " + std::to_string(n) + " tokens is absurd");
  if (types.size() != n) return Status::Error("token type count differs from token count");
  if (!scores.empty() && scores.size() != n) {
    return Status::Error("token score count differs from token count");
  }
  if (lstrip.size() != n || rstrip.size() != n) return Status::Error("strip flags size mismatch");
  for (int32_t id : {bos_id, eos_id, eot_id, unk_id, pad_id, eom_id, fim_pad_id, fim_rep_id, fim_sep_id}) {
    if (id < -1 || id >= static_cast<int32_t>(n)) {
      return Status::Error("special token id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------
// GGUF

namespace {
Expected<int32_t> OptionalId(const GgufFile& f, const char* key, int32_t n) {
  if (!f.Find(key)) return -1;
  auto v = f.GetInt(key);
  if (!v.ok()) return v.status();
  // llama.cpp writes -1 (as u32 0xFFFFFFFF) for "none" in some converters.
  if (*v == 0xFFFFFFFFll || *v == -1) return -1;
  if (*v < 0 || *v >= n) {
    return Status::Error(std::string(key) + " = " + std::to_string(*v) +
                         " is outside the vocabulary of " + std::to_string(n) + " tokens");
  }
  return static_cast<int32_t>(*v);
}

Expected<bool> OptionalBool(const GgufFile& f, const char* key, bool dflt) {
  if (!f.Find(key)) return dflt;
  return f.GetBool(key);
}
}  // namespace

Expected<Vocab> VocabFromGguf(const GgufFile& f) {
  Vocab v;
  auto model = f.GetString(gguf_keys::kTokModel);
  if (!model.ok() && !f.Find(gguf_keys::kTokModel)) {  // a file without a vocabulary: which kind it is
    auto arch = f.GetString("general.architecture");
    if (arch.ok() && *arch == "tlr-router") {
      return Status::Error("this is a router file, not a model or a vocabulary (a router goes to --router)");
    }
    return Status::Error("this GGUF file has no tokenizer (no tokenizer.ggml.model): give a model file or a "
                         "vocabulary-only GGUF");
  }
  if (!model.ok()) return model.status();
  if (*model == "gpt2") {
    v.model = VocabModel::kBpe;
  } else if (*model == "llama") {
    v.model = VocabModel::kSpm;
    v.add_space_prefix = true;
  } else {
    return Status::Error("tokenizer.ggml.model '" + *model +
                         "' is not supported (supported: gpt2, llama)");
  }
  if (f.Find(gguf_keys::kTokPre)) {
    auto pre = f.GetString(gguf_keys::kTokPre);
    if (!pre.ok()) return pre.status();
    v.pre = *pre;
  }
  auto tokens = f.GetArray(gguf_keys::kTokTokens, GgufType::kString);
  if (!tokens.ok()) return tokens.status();
  const auto& ta = **tokens;
  const auto n = static_cast<int32_t>(ta.items.size());
  if (n == 0) return Status::Error("tokenizer.ggml.tokens is empty");
  v.tokens.reserve(n);
  for (const auto& t : ta.items) v.tokens.push_back(std::get<std::string>(t.v));

  v.types.assign(n, TokenType::kNormal);
  if (f.Find(gguf_keys::kTokTypes)) {
    auto types = f.GetArray(gguf_keys::kTokTypes, GgufType::kInt32);
    if (!types.ok()) return types.status();
    if (static_cast<int32_t>((*types)->items.size()) != n) {
      return Status::Error("tokenizer.ggml.token_type has " +
                           std::to_string((*types)->items.size()) + " entries for " +
                           std::to_string(n) + " tokens");
    }
    for (int32_t i = 0; i < n; ++i) {
      const int32_t t = std::get<int32_t>((*types)->items[i].v);
      if (t < 0 || t > 6) {
        return Status::Error("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " +
                             std::to_string(t) + " is not a token type (0..6)");
      }
      v.types[i] = static_cast<TokenType>(t);
    }
  }
  if (f.Find(gguf_keys::kTokScores)) {
    auto scores = f.GetArray(gguf_keys::kTokScores, GgufType::kFloat32);
    if (!scores.ok()) return scores.status();
    if (static_cast<int32_t>((*scores)->items.size()) != n) {
      return Status::Error("tokenizer.ggml.scores has " + std::to_string((*scores)->items.size()) +
                           " entries for " + std::to_string(n) + " tokens");
    }
    v.scores.reserve(n);
    for (const auto& s : (*scores)->items) v.scores.push_back(std::get<float>(s.v));
  }
  if (f.Find(gguf_keys::kTokMerges)) {
    auto merges = f.GetArray(gguf_keys::kTokMerges, GgufType::kString);
    if (!merges.ok()) return merges.status();
    v.merges.reserve((*merges)->items.size());
    for (size_t i = 0; i < (*merges)->items.size(); ++i) {
      const auto& m = std::get<std::string>((*merges)->items[i].v);
      // Split at the first space after the first character (a piece may itself be " ").
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (sp == std::string::npos) {
        return Status::Error("tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + m +
                             "' is not two pieces separated by a space");
      }
      v.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
  } else if (v.model == VocabModel::kBpe) {
    return Status::Error("tokenizer.ggml.merges is missing (a gpt2 tokenizer needs its merges)");
  }
  const std::pair<const char*, int32_t*> ids[] = {
      {gguf_keys::kTokBos, &v.bos_id}, {gguf_keys::kTokEos, &v.eos_id},
      {gguf_keys::kTokEot, &v.eot_id}, {gguf_keys::kTokUnk, &v.unk_id},
      {gguf_keys::kTokPad, &v.pad_id}, {gguf_keys::kTokEom, &v.eom_id},
      {gguf_keys::kTokFimPad, &v.fim_pad_id}, {gguf_keys::kTokFimRep, &v.fim_rep_id},
      {gguf_keys::kTokFimSep, &v.fim_sep_id}};
  for (const auto& [key, dst] : ids) {
    auto id = OptionalId(f, key, n);
    if (!id.ok()) return id.status();
    *dst = *id;
  }
  // Llama 3's pre-tokenizer names mean a BOS at the start and whole pre-tokens kept whether or
  // not the file says add_bos_token (files converted from Meta's tokenizer_config.json lack it),
  // as llama.cpp reads them (llama_vocab::impl::load).
  const bool llama3 = v.model == VocabModel::kBpe &&
                      (v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3" || v.pre == "falcon3");
  auto add_bos = OptionalBool(f, gguf_keys::kTokAddBos, v.model == VocabModel::kSpm || llama3);
  auto add_eos = OptionalBool(f, gguf_keys::kTokAddEos, false);
  auto add_space = OptionalBool(f, gguf_keys::kTokAddSpacePrefix, v.add_space_prefix);
  if (!add_bos.ok()) return add_bos.status();
  if (!add_eos.ok()) return add_eos.status();
  if (!add_space.ok()) return add_space.status();
  v.add_bos = *add_bos && v.bos_id >= 0;
  v.add_eos = *add_eos && v.eos_id >= 0;
  v.add_space_prefix = *add_space;
  if (llama3) v.ignore_merges = true;
  v.lstrip.assign(n, 0);
  v.rstrip.assign(n, 0);
  TLR_RETURN_IF_ERROR(v.Validate());
  return v;
}

void VocabToGguf(const Vocab& v, GgufWriter* w) {
  w->Set(gguf_keys::kTokModel, GgufValue::Str(v.model == VocabModel::kBpe ? "gpt2" : "llama"));
  w->Set(gguf_keys::kTokPre, GgufValue::Str(v.pre));
  w->Set(gguf_keys::kTokTokens, GgufValue::StrArray(v.tokens));
  std::vector<int32_t> types(v.types.size());
  for (size_t i = 0; i < types.size(); ++i) types[i] = static_cast<int32_t>(v.types[i]);
  w->Set(gguf_keys::kTokTypes, GgufValue::I32Array(types));
  if (!v.scores.empty()) w->Set(gguf_keys::kTokScores, GgufValue::F32Array(v.scores));
  if (!v.merges.empty()) {
    std::vector<std::string> merges;
    merges.reserve(v.merges.size());
    for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
    w->Set(gguf_keys::kTokMerges, GgufValue::StrArray(merges));
  }
  const std::pair<const char*, int32_t> ids[] = {
      {gguf_keys::kTokBos, v.bos_id}, {gguf_keys::kTokEos, v.eos_id},
      {gguf_keys::kTokEot, v.eot_id}, {gguf_keys::kTokUnk, v.unk_id},
      {gguf_keys::kTokPad, v.pad_id}, {gguf_keys::kTokEom, v.eom_id},
      {gguf_keys::kTokFimPad, v.fim_pad_id}, {gguf_keys::kTokFimRep, v.fim_rep_id},
      {gguf_keys::kTokFimSep, v.fim_sep_id}};
  for (const auto& [key, id] : ids) {
    if (id >= 0) w->Set(key, GgufValue::U32(static_cast<uint32_t>(id)));
  }
  w->Set(gguf_keys::kTokAddBos, GgufValue(v.add_bos));
  w->Set(gguf_keys::kTokAddEos, GgufValue(v.add_eos));
  if (v.model == VocabModel::kSpm) {
    w->Set(gguf_keys::kTokAddSpacePrefix, GgufValue(v.add_space_prefix));
  }
}

// ---------------------------------------------------------------------------------------
// Hugging Face tokenizer.json

namespace {
using nlohmann::json;

// Collects the Split regexes of a pre_tokenizer; ByteLevel with use_regex means GPT-2's.
Status CollectPreTokenizer(const json& pt, Vocab* v) {
  if (pt.is_null()) return Status::Ok();
  if (!pt.is_object() || !pt.contains("type") || !pt["type"].is_string()) {
    return Status::Error("pre_tokenizer is not an object with a string 'type'");
  }
  const std::string type = pt["type"];
  if (type == "Sequence") {
    if (!pt.contains("pretokenizers") || !pt["pretokenizers"].is_array()) {
      return Status::Error("pre_tokenizer Sequence has no 'pretokenizers' array");
    }
    for (const auto& p : pt["pretokenizers"]) TLR_RETURN_IF_ERROR(CollectPreTokenizer(p, v));
    return Status::Ok();
  }
  if (type == "Split") {
    const json& pat = pt.value("pattern", json());
    if (!pat.is_object() || !pat.contains("Regex") || !pat["Regex"].is_string()) {
      return Status::Error("pre_tokenizer Split needs pattern.Regex (string patterns unsupported)");
    }
    if (pt.value("behavior", std::string("Isolated")) != "Isolated" || pt.value("invert", false)) {
      return Status::Error("pre_tokenizer Split: only behavior Isolated without invert is supported");
    }
    v->pre_regex.push_back(pat["Regex"].get<std::string>());
    return Status::Ok();
  }
  if (type == "ByteLevel") {
    if (pt.value("add_prefix_space", false)) {
      return Status::Error("pre_tokenizer ByteLevel with add_prefix_space is not supported");
    }
    if (pt.value("use_regex", true)) {
      v->pre_regex.push_back(PreTokenizerPatterns("gpt-2").value().front());
    }
    return Status::Ok();
  }
  if (type == "Digits" && pt.value("individual_digits", false)) {
    v->pre_regex.push_back("\\p{N}");
    return Status::Ok();
  }
  if (type == "Metaspace") return Status::Ok();  // handled as the SentencePiece escape
  return Status::Error("pre_tokenizer type '" + type + "' is not supported");
}

bool HasType(const json& j, const std::string& type) {
  if (j.is_object()) {
    if (j.contains("type") && j["type"].is_string() && j["type"] == type) return true;
    for (const auto& [k, x] : j.items()) {
      if (HasType(x, type)) return true;
    }
  } else if (j.is_array()) {
    for (const auto& x : j) {
      if (HasType(x, type)) return true;
    }
  }
  return false;
}

// A special token named in tokenizer_config.json: a string or {"content": "..."}.
std::string ConfigToken(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return "";
  const json& t = cfg[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"];
  return "";
}

Expected<Vocab> ParseHf(HfTokenizerJson& file, const json& cfg) {
  const json& j = file.doc;
  Vocab v;
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    return Status::Error("tokenizer.json has no 'model' object");
  }
  const json& m = j["model"];
  const std::string mtype = m.value("type", std::string("BPE"));
  if (mtype != "BPE") {
    return Status::Error("tokenizer.json model type '" + mtype + "' is not supported (BPE only)");
  }
  const bool byte_level = HasType(j.value("pre_tokenizer", json()), "ByteLevel") ||
                          HasType(j.value("decoder", json()), "ByteLevel");
  const bool byte_fallback = m.value("byte_fallback", false);
  if (byte_level) {
    v.model = VocabModel::kBpe;
  } else if (byte_fallback) {
    v.model = VocabModel::kSpm;  // SentencePiece converted to HF BPE (Llama 2, Phi-3)
    const std::string norm = j.value("normalizer", json()).dump();
    const std::string pre = j.value("pre_tokenizer", json()).dump();
    v.add_space_prefix = norm.find("Prepend") != std::string::npos ||
                         pre.find("\"prepend_scheme\":\"first\"") != std::string::npos ||
                         pre.find("\"prepend_scheme\":\"always\"") != std::string::npos ||
                         pre.find("\"add_prefix_space\":true") != std::string::npos;
  } else {
    return Status::Error(
        "tokenizer.json is neither byte-level BPE nor SentencePiece-style BPE with byte_fallback");
  }
  if (v.model == VocabModel::kBpe) {
    TLR_RETURN_IF_ERROR(CollectPreTokenizer(j.value("pre_tokenizer", json()), &v));
    v.pre = v.pre_regex.empty() ? "none" : "tokenizer.json";
    // Name well-known pattern sets the way tokenizer.ggml.pre does, so a converted GGUF loads
    // in llama.cpp too; the exact tokenizer.json patterns are still the ones used here.
    static const std::pair<const char*, const char*> kNamed[] = {
        {"gpt-2", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
        {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
        {"llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    };
    for (const auto& [name, regex] : kNamed) {
      if (v.pre_regex.size() == 1 && v.pre_regex[0] == regex) v.pre = name;
    }
    const json& norm = j.value("normalizer", json());
    if (HasType(norm, "NFC")) v.normalize_nfc = true;
    if (!norm.is_null() && !HasType(norm, "NFC")) {
      return Status::Error("tokenizer.json normalizer " + norm.value("type", std::string("?")) +
                           " is not supported (NFC only)");
    }
  }
  v.ignore_merges = m.value("ignore_merges", false);

  if (!file.vocab_streamed) return Status::Error("tokenizer.json model has no 'vocab' object");
  int64_t max_id = -1;
  for (const auto& [tok, id] : file.vocab) {
    if (id < 0 || id >= (1 << 24)) return Status::Error("tokenizer.json vocab entry '" + tok + "' has a bad id");
    max_id = std::max(max_id, id);
  }
  const json added = j.value("added_tokens", json::array());
  if (!added.is_array()) return Status::Error("tokenizer.json added_tokens is not an array");
  for (const auto& a : added) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string()) {
      return Status::Error("tokenizer.json added_tokens entry without integer id and content");
    }
    const int64_t id = a["id"];
    if (id < 0 || id >= (1 << 24)) return Status::Error("tokenizer.json added token id out of range");
    max_id = std::max(max_id, id);
  }
  const auto n = static_cast<size_t>(max_id + 1);
  v.tokens.assign(n, "");
  v.types.assign(n, TokenType::kUnused);
  v.lstrip.assign(n, 0);
  v.rstrip.assign(n, 0);
  for (auto& [tok, id] : file.vocab) {
    const auto i = static_cast<size_t>(id);
    v.types[i] = TokenType::kNormal;
    if (v.model == VocabModel::kSpm && tok.size() == 6 && tok.rfind("<0x", 0) == 0 && tok[5] == '>') {
      v.types[i] = TokenType::kByte;
    }
    v.tokens[i] = std::move(tok);
  }
  for (const auto& a : added) {
    const auto i = a["id"].get<size_t>();
    v.tokens[i] = a["content"];
    v.types[i] = a.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
    v.lstrip[i] = a.value("lstrip", false);
    v.rstrip[i] = a.value("rstrip", false);
  }
  for (size_t i = 0; i < n; ++i) {
    if (v.types[i] == TokenType::kUnused && v.tokens[i].empty()) {
      v.tokens[i] = "[UNUSED_" + std::to_string(i) + "]";
    }
  }
  if (file.merges_streamed) {
    if (!file.merges_error.empty()) return Status::Error(file.merges_error);
    v.merges = std::move(file.merges);
  } else if (m.contains("merges")) {
    return Status::Error("tokenizer.json model.merges is not an array");
  }
  // Token -> id (the first id of a text): an index for the SentencePiece scores' one lookup per
  // merge; a scan for the few special tokens of byte-level BPE.
  std::unordered_map<std::string, int32_t> index;
  if (v.model == VocabModel::kSpm) {
    for (size_t i = 0; i < n; ++i) index.emplace(v.tokens[i], static_cast<int32_t>(i));
  }
  auto id_of = [&](const std::string& t) -> int32_t {
    if (v.model == VocabModel::kSpm) {
      auto it = index.find(t);
      return it == index.end() ? -1 : it->second;
    }
    auto it = std::find(v.tokens.begin(), v.tokens.end(), t);
    return it == v.tokens.end() ? -1 : static_cast<int32_t>(it - v.tokens.begin());
  };
  if (m.contains("unk_token") && m["unk_token"].is_string()) v.unk_id = id_of(m["unk_token"]);
  if (v.model == VocabModel::kSpm) {
    // SentencePiece ranks tokens by score; a merge's rank gives the same order.
    v.scores.assign(n, -1e9f);
    for (size_t r = 0; r < v.merges.size(); ++r) {
      const int32_t id = id_of(v.merges[r].first + v.merges[r].second);
      if (id >= 0 && v.scores[id] == -1e9f) v.scores[id] = -static_cast<float>(r);
    }
  }
  // BOS/EOS: the post-processor template says what add_special adds.
  const json& post = j.value("post_processor", json());
  if (post.is_object() && post.value("type", std::string()) == "TemplateProcessing" &&
      post.contains("single") && post["single"].is_array() && !post["single"].empty()) {
    const json& single = post["single"];
    const json& first = single.front();
    const json& last = single.back();
    if (first.contains("SpecialToken")) {
      v.bos_id = id_of(first["SpecialToken"].value("id", std::string()));
      v.add_bos = v.bos_id >= 0;
    }
    if (single.size() > 1 && last.contains("SpecialToken")) {
      v.eos_id = id_of(last["SpecialToken"].value("id", std::string()));
      v.add_eos = v.eos_id >= 0;
    }
  }
  if (const std::string b = ConfigToken(cfg, "bos_token"); !b.empty() && v.bos_id < 0) v.bos_id = id_of(b);
  if (const std::string e = ConfigToken(cfg, "eos_token"); !e.empty() && v.eos_id < 0) v.eos_id = id_of(e);
  if (const std::string p = ConfigToken(cfg, "pad_token"); !p.empty()) v.pad_id = id_of(p);
  if (cfg.is_object() && cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
    v.add_bos = cfg["add_bos_token"].get<bool>() && v.bos_id >= 0;
  }
  if (cfg.is_object() && cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean()) {
    v.add_eos = cfg["add_eos_token"].get<bool>() && v.eos_id >= 0;
  }
  for (const char* eot : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>"}) {
    if (v.eot_id < 0) v.eot_id = id_of(eot);
  }
  TLR_RETURN_IF_ERROR(v.Validate());
  return v;
}
}  // namespace

Expected<Vocab> VocabFromHfJson(std::string_view json_text, const std::string& config_json) {
  auto file = ReadHfTokenizerJson(json_text);
  if (!file.ok()) return file.status();
  json cfg;
  if (!config_json.empty()) {
    cfg = json::parse(config_json, nullptr, false);
    if (cfg.is_discarded()) return Status::Error("tokenizer_config.json is not valid JSON");
  }
  try {
    return ParseHf(*file, cfg);
  } catch (const json::exception& e) {
    return Status::Error(std::string("tokenizer.json has an unexpected shape: ") + e.what());
  }
}

Expected<Vocab> VocabFromHfFile(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  std::string config;
  const auto cfg_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(cfg_path, ec)) {
    auto c = ReadFileToString(cfg_path.string());
    if (c.ok()) config = std::move(c).value();
  }
  auto v = VocabFromHfJson(*text, config);
  if (!v.ok()) return v.status().WithPrefix("'" + path + "'");
  return v;
}

}  // namespace tlr
