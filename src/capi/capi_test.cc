// The C API through libtlr.so only (this test links nothing else of TLR): generation on the
// bundled demo pair, the modes against each other, cancel and busy from other threads, a
// callback that stops, an unreachable server (FALLBACK tokens), the errors and their codes,
// tokenize / detokenize with short buffers. Built into the asan preset too.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tlr.h"

namespace {

// The C API's test sees only tlr.h (as an app does), so it names the demo folder itself.
const std::string kDemo = std::string(TLR_SOURCE_DIR) + "/models/demo/";

// Test question 2 of the demo pair: the SLM answers river, the LLM (and joint routing) cave.
const char* kPrompt = "Question: Where does a fexko live?\nA. marsh\nB. desert\nC. forest\nD. river\nE. cave\n";

struct Token {
  int32_t id;
  int source;
  std::string text;
  bool operator==(const Token&) const = default;
};

int Collect(const tlr_token* t, void* user) {
  static_cast<std::vector<Token>*>(user)->push_back({t->id, t->source, std::string(t->text, t->text_len)});
  return 0;
}

class CapiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tlr_device_params dp;
    tlr_device_params_init(&dp);
    const std::string slm = kDemo + "slm.gguf", router = kDemo + "router.gguf", llm = kDemo + "llm.gguf";
    dp.slm_path = slm.c_str();
    dp.router = router.c_str();
    ASSERT_EQ(tlr_device_open(&dp, &device_), TLR_OK) << tlr_last_error();
    tlr_llm_params lp;
    tlr_llm_params_init(&lp);
    lp.model_path = llm.c_str();
    ASSERT_EQ(tlr_llm_open(&lp, &llm_), TLR_OK) << tlr_last_error();
  }
  static void TearDownTestSuite() {
    tlr_llm_free(llm_);
    tlr_device_free(device_);
    llm_ = nullptr;
    device_ = nullptr;
  }

  static std::vector<Token> Generate(const tlr_generate_params& p, const tlr_llm* llm, tlr_stats* st = nullptr) {
    std::vector<Token> out;
    tlr_stats local;
    local.struct_size = sizeof local;
    EXPECT_EQ(tlr_generate(device_, llm, kPrompt, &p, Collect, &out, st ? st : &local), TLR_OK) << tlr_last_error();
    return out;
  }
  static tlr_generate_params Params(int mode, int max_tokens = 40) {
    tlr_generate_params p;
    tlr_generate_params_init(&p);
    p.mode = mode;
    p.max_tokens = max_tokens;
    return p;
  }

  static tlr_device* device_;
  static tlr_llm* llm_;
};
tlr_device* CapiTest::device_ = nullptr;
tlr_llm* CapiTest::llm_ = nullptr;

int CountSource(const std::vector<Token>& v, int source) {
  int n = 0;
  for (const Token& t : v) n += t.source == source;
  return n;
}
std::string Text(const std::vector<Token>& v) {
  std::string s;
  for (const Token& t : v) s += t.text;
  return s;
}
std::vector<int32_t> Ids(const std::vector<Token>& v) {
  std::vector<int32_t> ids;
  for (const Token& t : v) ids.push_back(t.id);
  return ids;
}

TEST_F(CapiTest, Version) {
  EXPECT_EQ(tlr_api_version(), TLR_API_VERSION);
  EXPECT_STRNE(tlr_version(), "");
  EXPECT_STREQ(tlr_status_name(TLR_ERR_BUSY), "TLR_ERR_BUSY");
}

TEST_F(CapiTest, JointRoutesSomeTokensAndMatchesWithPipelineOff) {
  tlr_stats st;
  st.struct_size = sizeof st;
  const std::vector<Token> joint = Generate(Params(TLR_MODE_JOINT), llm_, &st);
  ASSERT_FALSE(joint.empty());
  EXPECT_GT(CountSource(joint, TLR_SOURCE_LLM), 0);
  EXPECT_GT(CountSource(joint, TLR_SOURCE_SLM), 0);
  EXPECT_EQ(CountSource(joint, TLR_SOURCE_FALLBACK), 0);
  EXPECT_NE(Text(joint).find("So the answer is cave."), std::string::npos) << Text(joint);
  EXPECT_EQ(st.generated, static_cast<int64_t>(joint.size()));
  EXPECT_EQ(st.routed, CountSource(joint, TLR_SOURCE_LLM));
  EXPECT_EQ(st.stop, TLR_STOP_EOS);
  tlr_device_info info;
  info.struct_size = sizeof info;
  ASSERT_EQ(tlr_device_get_info(device_, &info), TLR_OK);
  EXPECT_FLOAT_EQ(st.threshold, info.router_threshold);  // the router's recommended one
  EXPECT_STREQ(info.router_kind, "citer");
  // The LLM's work: in process exact; at least one generated token per routed one, and no more
  // asked than the budget allows (1: answers only, no lookahead).
  EXPECT_GE(st.llm_generated, st.routed);
  EXPECT_GT(st.llm_prefilled, 0);
  EXPECT_GT(st.llm_forward_ms, 0);
  tlr_generate_params off = Params(TLR_MODE_JOINT);
  off.pipeline = 0;
  tlr_stats off_st;
  off_st.struct_size = sizeof off_st;
  EXPECT_EQ(Generate(off, llm_, &off_st), joint);
  EXPECT_EQ(off_st.llm_generated, off_st.routed);
  tlr_generate_params tight = Params(TLR_MODE_JOINT);
  tight.llm_budget = 1;
  tlr_stats tight_st;
  tight_st.struct_size = sizeof tight_st;
  EXPECT_EQ(Generate(tight, llm_, &tight_st), joint);
  EXPECT_LE(tight_st.llm_generated, tight_st.llm_calls);  // no lookahead: at most one token a call
  EXPECT_GE(tight_st.llm_generated, tight_st.routed);
  tight.llm_budget = 0.5;  // below one token per routed token: refused
  EXPECT_NE(tlr_generate(device_, llm_, kPrompt, &tight, nullptr, nullptr, nullptr), TLR_OK);
  // The cost policy at the same threshold, on a question the LLM has not read (run first): the
  // first (cold) call must clear a far lower bar, so fewer tokens go to the LLM; a budget below
  // any call's price routes nothing; an unknown policy is refused.
  const char* other = "Question: What would you use a tharko for?\nA. building\nB. singing\nC. cooking\nD. fishing\nE. healing\n";
  tlr_generate_params cost = Params(TLR_MODE_JOINT);
  cost.policy = TLR_POLICY_COST;
  tlr_stats cost_st, thr_st;
  cost_st.struct_size = thr_st.struct_size = sizeof cost_st;
  ASSERT_EQ(tlr_generate(device_, llm_, other, &cost, nullptr, nullptr, &cost_st), TLR_OK) << tlr_last_error();
  tlr_generate_params thr = Params(TLR_MODE_JOINT);
  ASSERT_EQ(tlr_generate(device_, llm_, other, &thr, nullptr, nullptr, &thr_st), TLR_OK) << tlr_last_error();
  EXPECT_GT(thr_st.routed, 0);
  EXPECT_LT(cost_st.routed, thr_st.routed);
  thr.cost_budget = 1;  // a call costs at least 1 + 4
  ASSERT_EQ(tlr_generate(device_, llm_, other, &thr, nullptr, nullptr, &thr_st), TLR_OK) << tlr_last_error();
  EXPECT_EQ(thr_st.routed, 0);
  cost.policy = 7;
  EXPECT_EQ(tlr_generate(device_, llm_, kPrompt, &cost, nullptr, nullptr, nullptr), TLR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tlr_last_error()).find("policy"), std::string::npos);
}

// The prompt cache: a prompt that continues the previous generation (a conversation's next
// turn) prefills only what the device's SLM cache does not hold, and gives the tokens a device
// without a prompt cache gives.
TEST_F(CapiTest, PromptCacheReusesThePreviousGeneration) {
  tlr_device_params dp;
  tlr_device_params_init(&dp);
  EXPECT_EQ(dp.kv_slots, 4);
  const std::string slm = kDemo + "slm.gguf", router = kDemo + "router.gguf";
  dp.slm_path = slm.c_str();
  dp.router = router.c_str();
  dp.kv_slots = 0;
  tlr_device* cold = nullptr;
  ASSERT_EQ(tlr_device_open(&dp, &cold), TLR_OK) << tlr_last_error();
  dp.kv_slots = -1;
  tlr_device* bad = nullptr;
  EXPECT_EQ(tlr_device_open(&dp, &bad), TLR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bad, nullptr);
  const tlr_generate_params p = Params(TLR_MODE_JOINT);
  std::string conversation = kPrompt;
  for (int turn = 0; turn < 3; ++turn) {
    std::vector<Token> warm_out, cold_out;
    tlr_stats warm, cold_st;
    warm.struct_size = cold_st.struct_size = sizeof warm;
    ASSERT_EQ(tlr_generate(device_, llm_, conversation.c_str(), &p, Collect, &warm_out, &warm), TLR_OK)
        << tlr_last_error();
    ASSERT_EQ(tlr_generate(cold, llm_, conversation.c_str(), &p, Collect, &cold_out, &cold_st), TLR_OK)
        << tlr_last_error();
    EXPECT_EQ(warm_out, cold_out) << "turn " << turn;
    EXPECT_EQ(cold_st.prompt_reused, 0);
    if (turn > 0) {
      // Everything but the new question (and the answer's last token, never fed) was held.
      EXPECT_GT(warm.prompt_reused, warm.prompt_tokens - 24) << "turn " << turn;
    }
    EXPECT_LT(warm.prompt_reused, warm.prompt_tokens);
    conversation += Text(warm_out) + "\nQuestion: And after that?\n";
  }
  tlr_device_free(cold);
}

// A conversation saved by one device and loaded by another (as a new process would): the next
// turn gives the tokens of an uninterrupted run and prefills none of the restored history
// but the tokens the saved context lacked. Foreign, corrupt and truncated files are errors.
TEST_F(CapiTest, ConversationSavedAndRestoredGoesOnWithoutPrefill) {
  const std::string slm = kDemo + "slm.gguf", router = kDemo + "router.gguf";
  auto open = [&](const std::string& model, const std::string& r) {
    tlr_device_params dp;
    tlr_device_params_init(&dp);
    dp.slm_path = model.c_str();
    dp.router = r.c_str();
    tlr_device* d = nullptr;
    EXPECT_EQ(tlr_device_open(&dp, &d), TLR_OK) << tlr_last_error();
    return d;
  };
  tlr_device* a = open(slm, router);
  const tlr_generate_params p = Params(TLR_MODE_JOINT);
  std::vector<Token> first;
  std::vector<tlr_message> conv = {{"user", kPrompt}};
  tlr_stats first_st;
  first_st.struct_size = sizeof first_st;
  ASSERT_EQ(tlr_generate_chat(a, llm_, conv.data(), conv.size(), &p, Collect, &first, &first_st), TLR_OK)
      << tlr_last_error();
  std::string reply;
  for (const Token& t : first) reply += t.text;
  const std::string next = "Why that one?";
  conv.push_back({"assistant", reply.c_str()});
  const std::string path = ::testing::TempDir() + "/tlr_conv_" + std::to_string(getpid()) + ".ctx";
  ASSERT_EQ(tlr_conversation_save(a, conv.data(), conv.size(), path.c_str()), TLR_OK) << tlr_last_error();
  conv.push_back({"user", next.c_str()});
  // Uninterrupted: the same device goes on.
  std::vector<Token> want;
  tlr_stats want_st;
  want_st.struct_size = sizeof want_st;
  ASSERT_EQ(tlr_generate_chat(a, llm_, conv.data(), conv.size(), &p, Collect, &want, &want_st), TLR_OK);
  // Restored: a new device loads the file.
  tlr_device* b = open(slm, router);
  ASSERT_EQ(tlr_conversation_load(b, path.c_str()), TLR_OK) << tlr_last_error();
  std::vector<Token> got;
  tlr_stats got_st;
  got_st.struct_size = sizeof got_st;
  ASSERT_EQ(tlr_generate_chat(b, llm_, conv.data(), conv.size(), &p, Collect, &got, &got_st), TLR_OK);
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_st.prompt_reused, want_st.prompt_reused);
  EXPECT_GE(got_st.prompt_reused, first_st.prompt_tokens);  // the history is not prefilled again
  // Another model's file, a corrupt one, a truncated one, none at all.
  tlr_device* other = open(kDemo + "llm.gguf", "maxprob");
  EXPECT_EQ(tlr_conversation_load(other, path.c_str()), TLR_ERR_INCOMPATIBLE);
  EXPECT_NE(std::string(tlr_last_error()).find("another model"), std::string::npos) << tlr_last_error();
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(bytes.size(), 200u);
  for (const auto& [name, content] : std::vector<std::pair<std::string, std::string>>{
           {"corrupt", [&] { std::string c = bytes; c[c.size() / 2] ^= 0x5a; return c; }()},
           {"truncated", bytes.substr(0, bytes.size() / 2)},
           {"garbage", std::string(64, 'x')}}) {
    const std::string bad = path + "." + name;
    std::ofstream(bad, std::ios::binary) << content;
    EXPECT_EQ(tlr_conversation_load(b, bad.c_str()), TLR_ERR_LOAD) << name;
    EXPECT_NE(std::string(tlr_last_error()).find(bad), std::string::npos) << tlr_last_error();
    std::remove(bad.c_str());
  }
  EXPECT_EQ(tlr_conversation_load(b, (path + ".none").c_str()), TLR_ERR_LOAD);
  {  // A device without a prompt cache has nowhere to put it: said, not dropped.
    tlr_device_params dp;
    tlr_device_params_init(&dp);
    dp.slm_path = slm.c_str();
    dp.router = router.c_str();
    dp.kv_slots = 0;
    tlr_device* none = nullptr;
    ASSERT_EQ(tlr_device_open(&dp, &none), TLR_OK) << tlr_last_error();
    EXPECT_EQ(tlr_conversation_load(none, path.c_str()), TLR_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tlr_last_error()).find("kv_slots"), std::string::npos) << tlr_last_error();
    tlr_device_free(none);
  }
  // A conversation the prompt cache knows nothing of cannot be saved.
  tlr_message stranger = {"user", "something never asked"};
  EXPECT_EQ(tlr_conversation_save(other, &stranger, 1, path.c_str()), TLR_ERR_INVALID_ARGUMENT);
  // One that begins as a cached one (the template's first tokens) gets only what it shares: not
  // the other conversation's question and answer.
  const std::string part = path + ".stranger";
  ASSERT_EQ(tlr_conversation_save(a, &stranger, 1, part.c_str()), TLR_OK) << tlr_last_error();
  {
    std::ifstream f(part, std::ios::binary);
    const std::string saved((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_LT(saved.size(), bytes.size() / 4) << "another conversation's context was saved as this one's";
  }
  tlr_device* c = open(slm, router);
  ASSERT_EQ(tlr_conversation_load(c, part.c_str()), TLR_OK) << tlr_last_error();
  tlr_stats c_st;
  c_st.struct_size = sizeof c_st;
  std::vector<Token> c_out;
  ASSERT_EQ(tlr_generate_chat(c, llm_, conv.data(), conv.size(), &p, Collect, &c_out, &c_st), TLR_OK);
  EXPECT_LT(c_st.prompt_reused, first_st.prompt_tokens / 2) << "the loaded file held the other conversation";
  EXPECT_EQ(c_out, want);
  tlr_device_free(c);
  std::remove(part.c_str());
  // The device still works after all that.
  std::vector<Token> after;
  EXPECT_EQ(tlr_generate_chat(b, llm_, conv.data(), conv.size(), &p, Collect, &after, nullptr), TLR_OK);
  EXPECT_EQ(after, want);
  std::remove(path.c_str());
  tlr_device_free(other);
  tlr_device_free(b);
  tlr_device_free(a);
}

// The prompt cache keeps a conversation's LLM backend; an LLM the caller frees (and another
// opened after it, maybe at the same address) is never used through a stale backend.
// weight_cache: "off" writes no cache; a directory gets the cache (not the model's directory);
// the next open maps it; the tokens are the same every way.
TEST_F(CapiTest, WeightCacheGoesWhereAskedAndOffWritesNone) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("tlr_wc_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "cache");
  fs::create_directories(dir / "model");
  fs::copy_file(kDemo + "slm.gguf", dir / "model" / "slm.gguf");
  const std::string slm = (dir / "model" / "slm.gguf").string(), router = kDemo + "router.gguf";
  const std::string cache = (dir / "cache").string();
  auto caches = [](const fs::path& d) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(d)) n += e.path().extension() == ".tlrw";
    return n;
  };
  tlr_device_params dp;
  tlr_device_params_init(&dp);
  EXPECT_STREQ(dp.weight_cache, "auto");
  dp.slm_path = slm.c_str();
  dp.router = router.c_str();
  std::vector<std::vector<Token>> outs;
  for (const char* wc : {"off", cache.c_str(), cache.c_str()}) {
    dp.weight_cache = wc;
    tlr_device* dev = nullptr;
    ASSERT_EQ(tlr_device_open(&dp, &dev), TLR_OK) << tlr_last_error();
    const tlr_generate_params p = Params(TLR_MODE_SMALL_ONLY);
    outs.emplace_back();
    EXPECT_EQ(tlr_generate(dev, nullptr, kPrompt, &p, Collect, &outs.back(), nullptr), TLR_OK) << tlr_last_error();
    tlr_device_free(dev);
    EXPECT_EQ(caches(dir / "model"), 0) << wc;
    EXPECT_EQ(caches(dir / "cache"), wc == cache.c_str() ? 1 : 0) << wc;
  }
  EXPECT_FALSE(outs[0].empty());
  EXPECT_EQ(outs[1], outs[0]);
  EXPECT_EQ(outs[2], outs[0]);
  fs::remove_all(dir);
}

// A packed SLM (tlr_model_pack) opened in place of the original: the same router fits it, the
// same routed tokens come out, no weight cache appears; a damaged one is refused.
TEST_F(CapiTest, PackedSlmRoutesAsTheOriginal) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("tlr_packed_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string packed = (dir / "slm.gguf").string(), router = kDemo + "router.gguf";
  ASSERT_EQ(tlr_model_pack((kDemo + "slm.gguf").c_str(), packed.c_str()), TLR_OK) << tlr_last_error();
  const tlr_generate_params p = Params(TLR_MODE_JOINT);
  const std::vector<Token> want = Generate(p, llm_);
  tlr_device_params dp;
  tlr_device_params_init(&dp);
  dp.slm_path = packed.c_str();
  dp.router = router.c_str();
  tlr_device* dev = nullptr;
  ASSERT_EQ(tlr_device_open(&dp, &dev), TLR_OK) << tlr_last_error();
  std::vector<Token> got;
  EXPECT_EQ(tlr_generate(dev, llm_, kPrompt, &p, Collect, &got, nullptr), TLR_OK) << tlr_last_error();
  tlr_device_free(dev);
  EXPECT_EQ(got, want);
  EXPECT_GT(CountSource(got, TLR_SOURCE_LLM), 0);
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);  // the packed file alone: no weight cache beside it

  {  // one bit of the last matrix (what follows it: the final norm and the file's padding)
    std::fstream f(packed, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5000, std::ios::end);
    char c;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x08);
    f.seekp(-5000, std::ios::end);
    f.write(&c, 1);
  }
  EXPECT_EQ(tlr_device_open(&dp, &dev), TLR_ERR_LOAD);
  EXPECT_NE(std::string(tlr_last_error()).find("is damaged"), std::string::npos) << tlr_last_error();
  EXPECT_EQ(tlr_model_pack((dir / "none.gguf").c_str(), (dir / "x.gguf").c_str()), TLR_ERR_LOAD);
  EXPECT_EQ(tlr_model_pack(nullptr, packed.c_str()), TLR_ERR_INVALID_ARGUMENT);
  fs::remove_all(dir);
}

TEST_F(CapiTest, PromptCacheSurvivesTheLlmBeingFreed) {
  const std::string llm_path = kDemo + "llm.gguf";
  tlr_llm_params lp;
  tlr_llm_params_init(&lp);
  lp.model_path = llm_path.c_str();
  const tlr_generate_params p = Params(TLR_MODE_JOINT);
  std::vector<Token> want;
  ASSERT_EQ(tlr_generate(device_, llm_, kPrompt, &p, Collect, &want, nullptr), TLR_OK);
  for (int round = 0; round < 3; ++round) {
    tlr_llm* l = nullptr;
    ASSERT_EQ(tlr_llm_open(&lp, &l), TLR_OK) << tlr_last_error();
    std::vector<Token> got;
    ASSERT_EQ(tlr_generate(device_, l, kPrompt, &p, Collect, &got, nullptr), TLR_OK) << tlr_last_error();
    EXPECT_EQ(got, want) << "round " << round;
    tlr_llm_free(l);
  }
  std::vector<Token> again;
  ASSERT_EQ(tlr_generate(device_, llm_, kPrompt, &p, Collect, &again, nullptr), TLR_OK);
  EXPECT_EQ(again, want);
}

TEST_F(CapiTest, ThresholdsZeroAndOneGiveEachModelAlone) {
  const std::vector<Token> small = Generate(Params(TLR_MODE_SMALL_ONLY), nullptr);
  const std::vector<Token> large = Generate(Params(TLR_MODE_LARGE_ONLY), llm_);
  EXPECT_EQ(CountSource(small, TLR_SOURCE_SLM), static_cast<int>(small.size()));
  EXPECT_EQ(CountSource(large, TLR_SOURCE_LLM), static_cast<int>(large.size()));
  EXPECT_NE(Text(small).find("So the answer is "), std::string::npos) << Text(small);  // the SLM's own (a guess)
  EXPECT_NE(Text(large).find("So the answer is cave."), std::string::npos) << Text(large);
  tlr_generate_params p = Params(TLR_MODE_JOINT);
  p.threshold = 0.0f;  // nothing is below 0: never routed
  EXPECT_EQ(Generate(p, llm_), small);
  p.threshold = 1.0f;  // every token routed: the LLM's answer
  EXPECT_EQ(Ids(Generate(p, llm_)), Ids(large));
}

TEST_F(CapiTest, GenerateIdsEqualsGenerateText) {
  std::vector<int32_t> ids(256);
  size_t n = 0;
  ASSERT_EQ(tlr_tokenize(device_, kPrompt, strlen(kPrompt), 1, 0, ids.data(), ids.size(), &n), TLR_OK);
  ids.resize(n);
  tlr_generate_params p = Params(TLR_MODE_JOINT);
  std::vector<Token> out;
  ASSERT_EQ(tlr_generate_ids(device_, llm_, ids.data(), ids.size(), &p, Collect, &out, nullptr), TLR_OK);
  EXPECT_EQ(out, Generate(p, llm_));
}

TEST_F(CapiTest, TokenizeAndDetokenizeWithShortBuffers) {
  const std::string text = "Question: Where does a fexko live?";
  size_t n = 0;
  EXPECT_EQ(tlr_tokenize(device_, text.data(), text.size(), 0, 0, nullptr, 0, &n), TLR_ERR_BUFFER_TOO_SMALL);
  ASSERT_GT(n, 1u);
  std::vector<int32_t> ids(n);
  size_t n2 = 0;
  EXPECT_EQ(tlr_tokenize(device_, text.data(), text.size(), 0, 0, ids.data(), n - 1, &n2), TLR_ERR_BUFFER_TOO_SMALL);
  ASSERT_EQ(tlr_tokenize(device_, text.data(), text.size(), 0, 0, ids.data(), n, &n2), TLR_OK);
  EXPECT_EQ(n2, n);
  size_t len = 0;
  char small[4];
  EXPECT_EQ(tlr_detokenize(device_, ids.data(), n, 0, small, sizeof small, &len), TLR_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(len, text.size());
  std::vector<char> buf(len + 1);
  ASSERT_EQ(tlr_detokenize(device_, ids.data(), n, 0, buf.data(), buf.size(), &len), TLR_OK);
  EXPECT_EQ(std::string(buf.data()), text);
  const int32_t bad = 1 << 20;
  EXPECT_EQ(tlr_detokenize(device_, &bad, 1, 0, buf.data(), buf.size(), &len), TLR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tlr_last_error()).find("1048576"), std::string::npos) << tlr_last_error();
}

TEST_F(CapiTest, CallbackStops) {
  struct State {
    int seen = 0;
  } state;
  auto stop_at_3 = [](const tlr_token*, void* user) -> int { return ++static_cast<State*>(user)->seen >= 3; };
  tlr_generate_params p = Params(TLR_MODE_JOINT);
  tlr_stats st;
  st.struct_size = sizeof st;
  ASSERT_EQ(tlr_generate(device_, llm_, kPrompt, &p, stop_at_3, &state, &st), TLR_OK);
  EXPECT_EQ(state.seen, 3);
  EXPECT_EQ(st.generated, 3);
  EXPECT_EQ(st.stop, TLR_STOP_CALLBACK);
}

// The callback holds the generation at its first token while another thread cancels it and
// tries a second generation on the same device (busy); then the first one stops as cancelled.
TEST_F(CapiTest, CancelAndBusyFromAnotherThread) {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool first = false, released = false;
    int tokens = 0;
  } s;
  auto hold = [](const tlr_token*, void* user) -> int {
    State& s = *static_cast<State*>(user);
    std::unique_lock<std::mutex> lock(s.mu);
    ++s.tokens;
    s.first = true;
    s.cv.notify_all();
    s.cv.wait(lock, [&] { return s.released; });
    return 0;
  };
  tlr_generate_params p = Params(TLR_MODE_JOINT, 200);
  tlr_stats st;
  st.struct_size = sizeof st;
  int rc = -1;
  std::thread gen([&] { rc = tlr_generate(device_, llm_, kPrompt, &p, hold, &s, &st); });
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait(lock, [&] { return s.first; });
  }
  std::vector<Token> other;
  EXPECT_EQ(tlr_generate(device_, llm_, kPrompt, &p, Collect, &other, nullptr), TLR_ERR_BUSY);
  EXPECT_NE(std::string(tlr_last_error()).find("already generating"), std::string::npos);
  size_t n = 0;
  int32_t ids[64];
  EXPECT_EQ(tlr_tokenize(device_, "Where", 5, 0, 0, ids, 64, &n), TLR_OK);  // allowed meanwhile
  EXPECT_EQ(tlr_device_cancel(device_), TLR_OK);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.released = true;
    s.cv.notify_all();
  }
  gen.join();
  EXPECT_EQ(rc, TLR_OK);
  EXPECT_EQ(st.stop, TLR_STOP_CANCELLED);
  EXPECT_EQ(s.tokens, 1);
  EXPECT_EQ(st.generated, 1);
  // Cancelling an idle device does nothing to the next generation.
  EXPECT_EQ(tlr_device_cancel(device_), TLR_OK);
  tlr_stats st2;
  st2.struct_size = sizeof st2;
  Generate(Params(TLR_MODE_JOINT), llm_, &st2);
  EXPECT_EQ(st2.stop, TLR_STOP_EOS);
}

// A thread that ends inside the token callback (pthread_exit: what Python does to a thread at
// interpreter exit) unwinds through tlr_generate, which releases the device on the way.
TEST_F(CapiTest, ThreadEndingInsideTheCallbackReleasesTheDevice) {
  auto body = [](void*) -> void* {
    auto exit_now = [](const tlr_token*, void*) -> int { pthread_exit(nullptr); };
    tlr_generate_params p = Params(TLR_MODE_JOINT);
    tlr_generate(device_, llm_, kPrompt, &p, exit_now, nullptr, nullptr);
    return reinterpret_cast<void*>(1);  // not reached
  };
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, nullptr, body, nullptr), 0);
  void* ret = nullptr;
  ASSERT_EQ(pthread_join(th, &ret), 0);
  EXPECT_EQ(ret, nullptr);
  tlr_stats st;
  st.struct_size = sizeof st;
  Generate(Params(TLR_MODE_JOINT), llm_, &st);  // not busy
  EXPECT_EQ(st.stop, TLR_STOP_EOS);
}

// A TCP socket bound to a free loopback port (*port), listening when asked, or -1.
int LoopbackSocket(bool listening, int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || (listening && listen(fd, 16) != 0) ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

// A loopback port nobody listens on.
int ClosedPort() {
  int port = 0;
  close(LoopbackSocket(false, &port));
  return port;
}

TEST_F(CapiTest, UnreachableServerGivesFallbackTokens) {
  const std::string url = "http://127.0.0.1:" + std::to_string(ClosedPort());
  tlr_llm_params lp;
  tlr_llm_params_init(&lp);
  lp.server_url = url.c_str();
  lp.timeout_s = 2;
  lp.retries = 0;
  tlr_llm* remote = nullptr;
  ASSERT_EQ(tlr_llm_open(&lp, &remote), TLR_OK) << tlr_last_error();
  tlr_stats st;
  st.struct_size = sizeof st;
  const std::vector<Token> out = Generate(Params(TLR_MODE_JOINT), remote, &st);
  tlr_llm_free(remote);
  EXPECT_GT(CountSource(out, TLR_SOURCE_FALLBACK), 0);
  EXPECT_EQ(CountSource(out, TLR_SOURCE_LLM), 0);
  EXPECT_EQ(st.fallbacks, CountSource(out, TLR_SOURCE_FALLBACK));
  EXPECT_STRNE(st.llm_failure, "");
  // The fallback tokens are the SLM's own: the SLM's answer.
  EXPECT_EQ(Ids(out), Ids(Generate(Params(TLR_MODE_SMALL_ONLY), nullptr)));
}

// tlr_device_cancel is seen within about 50 ms wherever the generation is: while the server is
// checked (one that takes connections and never answers held it for the whole timeout) and
// while a long prompt is read (seconds for thousands of tokens).
TEST_F(CapiTest, CancelStopsTheServerCheckAndTheReadingOfALongPrompt) {
  int port = 0;
  const int fd = LoopbackSocket(true, &port);  // connections queue in the backlog, unanswered
  ASSERT_GE(fd, 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  tlr_llm_params lp;
  tlr_llm_params_init(&lp);
  lp.server_url = url.c_str();
  lp.timeout_s = 30;
  lp.retries = 0;
  tlr_llm* silent = nullptr;
  ASSERT_EQ(tlr_llm_open(&lp, &silent), TLR_OK) << tlr_last_error();
  // The long prompt: a few thousand tokens of the demo world's text.
  std::string long_prompt;
  while (long_prompt.size() < 30000) long_prompt += kPrompt;
  struct Case {
    const char* what;
    const tlr_llm* llm;
    std::string prompt;
    int mode;
  };
  for (const Case& c : {Case{"server check", silent, kPrompt, TLR_MODE_JOINT},
                        Case{"long prompt", nullptr, long_prompt, TLR_MODE_SMALL_ONLY}}) {
    tlr_generate_params p = Params(c.mode, 8);
    tlr_stats st;
    st.struct_size = sizeof st;
    std::vector<Token> out;
    int rc = -1;
    const auto t0 = std::chrono::steady_clock::now();
    std::thread gen([&] { rc = tlr_generate(device_, c.llm, c.prompt.c_str(), &p, Collect, &out, &st); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto cancelled_at = std::chrono::steady_clock::now();
    EXPECT_EQ(tlr_device_cancel(device_), TLR_OK);
    gen.join();
    const double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - cancelled_at).count();
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(rc, TLR_OK) << c.what << ": " << tlr_last_error();
    EXPECT_EQ(st.stop, TLR_STOP_CANCELLED) << c.what;
    EXPECT_TRUE(out.empty()) << c.what << ": tokens after a cancel before the first";
    EXPECT_LT(after, 5.0) << c.what << ": the cancel was seen " << after << " s late (" << total << " s in all)";
  }
  tlr_llm_free(silent);
  close(fd);
  // The device goes on as before.
  EXPECT_FALSE(Generate(Params(TLR_MODE_SMALL_ONLY, 4), nullptr).empty());
}

TEST_F(CapiTest, Errors) {
  tlr_device* d = nullptr;
  tlr_device_params dp;
  tlr_device_params_init(&dp);
  const std::string missing = kDemo + "no-such-file.gguf", router = kDemo + "router.gguf", llm = kDemo + "llm.gguf";
  dp.slm_path = missing.c_str();
  dp.router = router.c_str();
  EXPECT_EQ(tlr_device_open(&dp, &d), TLR_ERR_LOAD);
  EXPECT_EQ(d, nullptr);
  EXPECT_NE(std::string(tlr_last_error()).find("no-such-file.gguf"), std::string::npos) << tlr_last_error();
  // The demo router belongs to the demo SLM, not to the LLM (another hidden size).
  dp.slm_path = llm.c_str();
  EXPECT_EQ(tlr_device_open(&dp, &d), TLR_ERR_INCOMPATIBLE) << tlr_last_error();
  dp.router = "no-such-router-kind";
  EXPECT_EQ(tlr_device_open(&dp, &d), TLR_ERR_LOAD) << tlr_last_error();
  dp.router = "maxprob";
  dp.kv_type = "f8";
  EXPECT_EQ(tlr_device_open(&dp, &d), TLR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tlr_device_open(nullptr, &d), TLR_ERR_INVALID_ARGUMENT);
  tlr_device_params unset{};
  EXPECT_EQ(tlr_device_open(&unset, &d), TLR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tlr_last_error()).find("tlr_device_params_init"), std::string::npos);

  tlr_generate_params p = Params(TLR_MODE_JOINT);
  p.threshold = 1.5f;
  EXPECT_EQ(tlr_generate(device_, llm_, kPrompt, &p, nullptr, nullptr, nullptr), TLR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tlr_last_error()).find("threshold"), std::string::npos);
  p = Params(TLR_MODE_JOINT);
  p.span = 0;
  EXPECT_EQ(tlr_generate(device_, llm_, kPrompt, &p, nullptr, nullptr, nullptr), TLR_ERR_INVALID_ARGUMENT);
  p = Params(7);
  EXPECT_EQ(tlr_generate(device_, llm_, kPrompt, &p, nullptr, nullptr, nullptr), TLR_ERR_INVALID_ARGUMENT);
  p = Params(TLR_MODE_JOINT);
  EXPECT_EQ(tlr_generate(device_, nullptr, kPrompt, &p, nullptr, nullptr, nullptr), TLR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tlr_generate(device_, llm_, "", &p, nullptr, nullptr, nullptr), TLR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tlr_generate(nullptr, llm_, kPrompt, &p, nullptr, nullptr, nullptr), TLR_ERR_INVALID_ARGUMENT);
  p.max_tokens = 1 << 30;  // the in-process LLM's KV cache would be sized for it
  EXPECT_EQ(tlr_generate(device_, llm_, kPrompt, &p, nullptr, nullptr, nullptr), TLR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tlr_last_error()).find("max tokens"), std::string::npos);
  p.max_tokens = 8;
  const int32_t bad_ids[] = {1, 70000};
  EXPECT_EQ(tlr_generate_ids(device_, llm_, bad_ids, 2, &p, nullptr, nullptr, nullptr), TLR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tlr_last_error()).find("70000"), std::string::npos);
  EXPECT_EQ(tlr_generate(device_, llm_, kPrompt, &p, nullptr, nullptr, nullptr), TLR_OK);
  EXPECT_STREQ(tlr_last_error(), "");

  tlr_llm* l = nullptr;
  tlr_llm_params lp;
  tlr_llm_params_init(&lp);
  EXPECT_EQ(tlr_llm_open(&lp, &l), TLR_ERR_INVALID_ARGUMENT);  // neither model nor server
  lp.server_url = "ftp://example.com";
  EXPECT_EQ(tlr_llm_open(&lp, &l), TLR_ERR_INVALID_ARGUMENT);
  lp.server_url = "http://127.0.0.1:1";
  lp.backend = "grpc";
  EXPECT_EQ(tlr_llm_open(&lp, &l), TLR_ERR_INVALID_ARGUMENT);
  lp.backend = "tlr";
  lp.timeout_s = -1;
  EXPECT_EQ(tlr_llm_open(&lp, &l), TLR_ERR_INVALID_ARGUMENT);
  // Checked at the open, naming what is wrong (they failed at every generation, or worse: a key
  // with a line break added a header of its own to every request).
  for (const auto& [field, want] : std::vector<std::pair<std::string, std::string>>{
           {"url:http://", "host is empty"},
           {"url:http://127.0.0.1:99999", "port"},
           {"url:http://[::1", "closing ']'"},
           {"url:http://127.0.0.1:1/a b", "space"},
           {"key:secret\r\nX-Injected: yes", "control character"},
           {"tok:/nonexistent/tokenizer.json", "llm_tokenizer"}}) {
    tlr_llm_params_init(&lp);
    const std::string value = field.substr(4);
    lp.server_url = field.rfind("url:", 0) == 0 ? value.c_str() : "http://127.0.0.1:1";
    if (field.rfind("key:", 0) == 0) lp.api_key = value.c_str();
    if (field.rfind("tok:", 0) == 0) lp.llm_tokenizer = value.c_str();
    EXPECT_EQ(tlr_llm_open(&lp, &l), TLR_ERR_INVALID_ARGUMENT) << field;
    EXPECT_NE(std::string(tlr_last_error()).find(want), std::string::npos) << field << ": " << tlr_last_error();
  }
  // Generation options that are the caller's mistake are argument errors, before any work.
  for (float bad : {-1.0f, std::nanf(""), INFINITY}) {
    tlr_generate_params gp = Params(TLR_MODE_JOINT, 4);
    gp.price_ratio = bad;
    EXPECT_EQ(tlr_generate(device_, llm_, kPrompt, &gp, nullptr, nullptr, nullptr), TLR_ERR_INVALID_ARGUMENT) << bad;
    gp = Params(TLR_MODE_JOINT, 4);
    gp.cost_budget = bad;
    EXPECT_EQ(tlr_generate(device_, llm_, kPrompt, &gp, nullptr, nullptr, nullptr), TLR_ERR_INVALID_ARGUMENT) << bad;
  }
  tlr_device_info info;
  info.struct_size = 0;
  EXPECT_EQ(tlr_device_get_info(device_, &info), TLR_ERR_INVALID_ARGUMENT);
  // A struct_size set by hand that cuts a field in two (here slm_path's pointer) is refused,
  // never read (it crashed on the cut pointer).
  tlr_device_params cut;
  tlr_device_params_init(&cut);
  cut.struct_size = 12;
  tlr_device* cut_device = nullptr;
  EXPECT_EQ(tlr_device_open(&cut, &cut_device), TLR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tlr_last_error()).find("struct_size"), std::string::npos) << tlr_last_error();
  EXPECT_EQ(cut_device, nullptr);
  tlr_llm_params_init(&lp);
  lp.model_path = missing.c_str();
  EXPECT_EQ(tlr_llm_open(&lp, &l), TLR_ERR_LOAD);
  EXPECT_NE(std::string(tlr_last_error()).find("LLM"), std::string::npos);
  EXPECT_EQ(l, nullptr);
  tlr_device_free(nullptr);
  tlr_llm_free(nullptr);
}

// A caller built against an older, shorter tlr_stats gets only the fields it knows.
TEST_F(CapiTest, ShorterStatsStructIsFilledOnlyToItsSize) {
  struct Old {
    tlr_stats head;
    char guard[8];
  } old;
  std::memset(&old, 0x5a, sizeof old);
  old.head.struct_size = offsetof(tlr_stats, stop);
  tlr_generate_params p = Params(TLR_MODE_SMALL_ONLY, 4);
  ASSERT_EQ(tlr_generate(device_, nullptr, kPrompt, &p, nullptr, nullptr, &old.head), TLR_OK);
  EXPECT_EQ(old.head.generated, 4);
  EXPECT_EQ(old.head.struct_size, offsetof(tlr_stats, stop));
  const unsigned char* rest = reinterpret_cast<const unsigned char*>(&old.head) + offsetof(tlr_stats, stop);
  for (size_t i = 0; i < sizeof(tlr_stats) - offsetof(tlr_stats, stop); ++i) ASSERT_EQ(rest[i], 0x5a) << i;
}

}  // namespace
