// Resumable LLM answers for router training (see label_cache.h).
#include "routing/label_cache.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/hash.h"

namespace tlr {

using nlohmann::json;

namespace {

std::string HexKey(uint64_t a, uint64_t b) {
  char x[17], y[17];
  return std::string(HexU64(a, x)) + std::string(HexU64(b, y));
}

}  // namespace

CachedLabelLlm::Key CachedLabelLlm::KeyOf(char kind, int max_tokens, const std::vector<int32_t>& ids) {
  const std::string head = std::string(1, kind) + std::to_string(max_tokens);
  Key k;
  k.a = Fnv1a(Fnv1a(kFnvOffset, head), ids.data(), ids.size() * sizeof(int32_t));
  k.b = Fnv1a(Fnv1a(0x84222325cbf29ce4ull, ids.data(), ids.size() * sizeof(int32_t)), head);
  return k;
}

Expected<std::unique_ptr<CachedLabelLlm>> CachedLabelLlm::Open(LabelLlm* inner, const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string identity = inner->model_id();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Error("cannot create the work directory " + dir + ": " + ec.message());
  const std::string manifest = (fs::path(dir) / "manifest.json").string();
  if (fs::exists(manifest, ec)) {
    std::ifstream in(manifest);
    std::stringstream ss;
    ss << in.rdbuf();
    const json m = json::parse(ss.str(), nullptr, false);
    if (m.is_discarded() || !m.is_object() || !m.contains("llm") || !m["llm"].is_string()) {
      return Status::Error(manifest + " is not a work directory's manifest (remove the directory or choose another)");
    }
    if (m["llm"].get<std::string>() != identity) {
      return Status::Error("the work directory " + dir + " holds answers of another LLM (" + m["llm"].get<std::string>() +
                           ", not " + identity + "): give a new --work-dir");
    }
  } else {
    std::ofstream out(manifest);
    out << json{{"llm", identity}, {"format", "tlr router train work directory 1"}}.dump(1) << "\n";
    if (!out) return Status::Error("cannot write " + manifest);
  }
  std::unique_ptr<CachedLabelLlm> c(new CachedLabelLlm(inner, (fs::path(dir) / "llm_answers.jsonl").string()));
  TLR_RETURN_IF_ERROR(c->Load());
  c->out_ = std::fopen(c->path_.c_str(), "a");
  if (!c->out_) return Status::Error("cannot append to " + c->path_);
  return c;
}

CachedLabelLlm::~CachedLabelLlm() {
  if (out_) std::fclose(out_);
}

Status CachedLabelLlm::Load() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return Status::Ok();  // a new directory
  std::string line;
  int64_t n = 0;
  uint64_t good = 0;  // bytes up to the end of the last whole answer
  bool torn = false;
  while (std::getline(in, line)) {
    ++n;
    const bool complete = !in.eof();  // ended by a newline
    if (line.empty()) {
      good += 1;
      continue;
    }
    const json j = json::parse(line, nullptr, false);
    // A run killed while writing leaves a torn last line: it is cut off and asked again.
    if (j.is_discarded() || !complete) {
      if (in.peek() == EOF) {
        torn = true;
        break;
      }
      return Status::Error(path_ + " line " + std::to_string(n) + " is not JSON (the file is damaged)");
    }
    if (!j.is_object() || !j.contains("key") || !j["key"].is_string() || j["key"].get<std::string>().size() != 32 ||
        !j.contains("out") || !j["out"].is_array()) {
      return Status::Error(path_ + " line " + std::to_string(n) + " is not an answer {key, out}");
    }
    const std::string hex = j["key"].get<std::string>();
    Key k;
    try {
      k.a = std::stoull(hex.substr(0, 16), nullptr, 16);
      k.b = std::stoull(hex.substr(16), nullptr, 16);
    } catch (const std::exception&) {
      return Status::Error(path_ + " line " + std::to_string(n) + ": the key is not hex");
    }
    std::vector<int32_t> out;
    for (const json& t : j["out"]) {
      if (!t.is_number_integer()) return Status::Error(path_ + " line " + std::to_string(n) + ": a token is not an integer");
      out.push_back(t.get<int32_t>());
    }
    answers_[k] = std::move(out);
    ++loaded_;
    good += line.size() + 1;
  }
  in.close();
  if (torn) {
    std::error_code ec;
    std::filesystem::resize_file(path_, good, ec);
    if (ec) return Status::Error("cannot cut the torn last line of " + path_ + ": " + ec.message());
  }
  return Status::Ok();
}

Expected<std::vector<std::vector<int32_t>>> CachedLabelLlm::Through(char kind, int max_tokens,
                                                                    const std::vector<std::vector<int32_t>>& in,
                                                                    const Ask& ask, const AnswerFn& on_answer) {
  std::vector<std::vector<int32_t>> out(in.size());
  std::vector<std::vector<int32_t>> missing;
  std::vector<size_t> where;
  std::vector<Key> keys;
  for (size_t i = 0; i < in.size(); ++i) {
    const Key k = KeyOf(kind, max_tokens, in[i]);
    auto it = answers_.find(k);
    if (it != answers_.end()) {
      out[i] = it->second;
      ++reused_;
      if (on_answer) on_answer(i, out[i]);
    } else {
      missing.push_back(in[i]);
      where.push_back(i);
      keys.push_back(k);
    }
  }
  if (missing.empty()) return out;
  // Each answer goes to the file the moment it arrives (a run killed half way through a batch
  // keeps what the LLM already answered); the file is synced when the batch is done.
  bool write_failed = false;
  auto record = [&](size_t m, const std::vector<int32_t>& answer) {
    const std::string line = json{{"key", HexKey(keys[m].a, keys[m].b)}, {"out", answer}}.dump() + "\n";
    std::lock_guard<std::mutex> l(mu_);
    if (std::fwrite(line.data(), 1, line.size(), out_) != line.size() || std::fflush(out_) != 0) write_failed = true;
    answers_[keys[m]] = answer;
    ++asked_;
    if (on_answer) on_answer(where[m], answer);
  };
  auto got = ask(missing, record);
  if (write_failed) return Status::Error("cannot write " + path_);
  if (fsync(fileno(out_)) != 0) return Status::Error("cannot sync " + path_);
  if (!got.ok()) return got.status();
  if (got->size() != missing.size()) return Status::Error("the LLM answered " + std::to_string(got->size()) + " of " +
                                                          std::to_string(missing.size()) + " questions");
  for (size_t m = 0; m < missing.size(); ++m) out[where[m]] = std::move((*got)[m]);
  return out;
}

Expected<std::vector<std::vector<int32_t>>> CachedLabelLlm::Predict(const std::vector<std::vector<int32_t>>& seqs,
                                                                    const AnswerFn& on_answer) {
  return Through('P', 0, seqs, [this](const auto& m, const AnswerFn& f) { return inner_->Predict(m, f); }, on_answer);
}

Expected<std::vector<std::vector<int32_t>>> CachedLabelLlm::Greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                                   int max_tokens, const AnswerFn& on_answer) {
  return Through('G', max_tokens, prompts,
                 [this, max_tokens](const auto& m, const AnswerFn& f) { return inner_->Greedy(m, max_tokens, f); },
                 on_answer);
}

Expected<std::vector<std::vector<int32_t>>> CachedLabelLlm::PredictNext(const std::vector<std::vector<int32_t>>& contexts,
                                                                        const AnswerFn& on_answer) {
  // An LLM that scores whole sequences at once answers through Predict (cached per sequence);
  // a bridged one is asked, and cached, per context.
  if (!inner_->next_only()) return LabelLlm::PredictNext(contexts, on_answer);
  return Through('N', 0, contexts, [this](const auto& m, const AnswerFn& f) { return inner_->PredictNext(m, f); },
                 on_answer);
}

}  // namespace tlr
