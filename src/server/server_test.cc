// The server over real HTTP on an ephemeral loopback port: joint generation through both
// remote backends equals in-process generation token for token, delta sync proven by the
// server's counters, bad requests get the right 4xx while the server keeps serving, API keys,
// the OpenAI endpoints (streaming, stop strings) and TLS with certificate verification.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "device/decode/decoder.h"
#include "device/remote/remote_llm.h"
#include "net/protocol.h"
#include "ops/thread_pool.h"
#include "routing/qa.h"
#include "routing/router.h"
#include "server/llm_server.h"
#include "util/temp_dir.h"
#include "util/test_support.h"
#include "device/decode/decode_test_support.h"

namespace tlr {
namespace {

using nlohmann::json;

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    slm_ = Model::Load(kDemo + "slm.gguf")->release();
    llm_ = Model::Load(kDemo + "llm.gguf")->release();
    router_ = new Router(std::move(Router::Load(kDemo + "router.gguf")).value());
    rows_ = new std::vector<QaRow>(std::move(LoadQaJsonl(kDemo + "test.jsonl")).value());
  }
  static void TearDownTestSuite() {
    delete slm_;
    delete llm_;
    delete router_;
    delete rows_;
  }
  // Starts a server on a free loopback port.
  void Start(ServerOptions so = {}, EngineLimits lim = {}) {
    engine_ = std::make_unique<LlmEngine>(*llm_, nullptr, lim, &metrics_);
    so.port = 0;
    server_ = std::make_unique<LlmServer>(engine_.get(), &metrics_, so);
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
    url_ = "http://127.0.0.1:" + std::to_string(server_->port());
  }
  std::unique_ptr<RemoteLlm> Connect(const std::string& backend, double sim_rtt_s = 0, double sim_jitter_s = 0) {
    RemoteOptions o;
    o.http.url = url_;
    o.protocol = *ParseRemoteProtocol(backend);
    o.http.timeout_s = 5;
    o.http.sim_rtt_s = sim_rtt_s;
    o.http.sim_jitter_s = sim_jitter_s;
    auto r = RemoteLlm::Connect(o, slm_->tokenizer());
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  using Run = DecodedTokens;
  Run Generate(LlmBackend* llm, const QaRow& row, float threshold, bool pipeline = true) {
    CollabDecoder dec(*slm_, router_, llm, &pool_);
    DecodeOptions d;
    d.threshold = threshold;
    d.max_tokens = 40;
    d.pipeline.enabled = pipeline;
    d.pipeline.llm_budget = 0;  // no limit: lookahead drafts cross the network too
    return DecodeAll(dec, slm_->tokenizer().Encode(QaPrompt(row)), d);
  }
  httplib::Client Client() {
    httplib::Client c(url_);
    c.set_read_timeout(std::chrono::seconds(10));
    return c;
  }

  static Model* slm_;
  static Model* llm_;
  static Router* router_;
  static std::vector<QaRow>* rows_;
  ThreadPool pool_{1};
  Metrics metrics_;
  std::unique_ptr<LlmEngine> engine_;
  std::unique_ptr<LlmServer> server_;
  std::string url_;
};
Model* ServerTest::slm_ = nullptr;
Model* ServerTest::llm_ = nullptr;
Router* ServerTest::router_ = nullptr;
std::vector<QaRow>* ServerTest::rows_ = nullptr;

TEST_F(ServerTest, JointGenerationThroughEitherBackendEqualsInProcess) {
  Start();
  for (const std::string backend : {"tlr", "openai"}) {
    // Jittered round trips: pipelined calls on one session arrive in any order.
    auto remote = Connect(backend, 0.01, 0.008);
    ASSERT_TRUE(remote);
    int64_t most_in_flight = 0;
    for (int q = 0; q < 4; ++q) {
      InProcessLlm local(*llm_, 1, 1024);
      const Run want = Generate(&local, (*rows_)[q], 0.95f, /*pipeline=*/false);
      for (bool pipeline : {false, true}) {
        const Run got = Generate(remote.get(), (*rows_)[q], 0.95f, pipeline);
        EXPECT_EQ(got.ids, want.ids) << backend << " question " << q << " pipeline " << pipeline;
        EXPECT_EQ(got.src, want.src) << backend << " question " << q << " pipeline " << pipeline;
        EXPECT_EQ(got.st.fallbacks, 0);
        if (pipeline) most_in_flight = std::max(most_in_flight, got.st.max_in_flight);
      }
      EXPECT_GT(want.st.routed, 0);
    }
    EXPECT_GT(most_in_flight, 1) << backend << ": calls were pipelined";
    const RemoteStats rs = remote->stats();
    EXPECT_EQ(rs.failed_calls, 0) << backend;
    if (backend == "tlr") {
      EXPECT_GT(rs.lookahead_tokens, 0);
    }
  }
  // The server generated lookahead drafts, and pipelined calls rewound the session.
  const std::string m = Client().Get("/metrics")->body;
  EXPECT_NE(m.find("tlr_lookahead_tokens_total"), std::string::npos);
  EXPECT_NE(m.find("tlr_rewound_tokens_total"), std::string::npos);
}

TEST_F(ServerTest, DeltaSyncIngestsEachTokenOnce) {
  Start();
  auto remote = Connect("tlr");
  ASSERT_TRUE(remote);
  for (int q = 0; q < 3; ++q) {
    const int64_t before = engine_->prefill_tokens() + engine_->decode_tokens();
    const Run run = Generate(remote.get(), (*rows_)[q], 0.99f, /*pipeline=*/false);
    const int64_t ingested = engine_->prefill_tokens() + engine_->decode_tokens() - before;
    // The last routed call's context: the prompt and every token before the last LLM token.
    int64_t last = -1;
    for (size_t i = 0; i < run.src.size(); ++i) {
      if (run.src[i] == TokenSource::kLlm) last = static_cast<int64_t>(i);
    }
    ASSERT_GE(run.st.llm_calls, 3) << "question " << q;
    const int64_t context = run.st.prompt_tokens + last;
    if (q == 0) {
      EXPECT_EQ(ingested, context);
    } else {
      // Later questions reuse the session: the server keeps the common prefix ("Question:").
      EXPECT_LE(ingested, context);
      EXPECT_GE(ingested, context - run.st.prompt_tokens);
    }
    EXPECT_LT(ingested, run.st.llm_calls * context / 2) << "re-sent context";
    // What the session holds, as the cost policy reads it: the last call's whole context.
    std::vector<int32_t> seq = slm_->tokenizer().Encode(QaPrompt((*rows_)[q]));
    seq.insert(seq.end(), run.ids.begin(), run.ids.end());
    EXPECT_GE(remote->HeldPrefix(seq), context) << "question " << q;
    EXPECT_LE(remote->HeldPrefix(seq), static_cast<int64_t>(seq.size()));
    std::vector<int32_t> other = seq;
    other[1] = other[1] == 5 ? 6 : 5;  // parts from the session after its first token
    EXPECT_EQ(remote->HeldPrefix(other), 1);
  }
}

TEST_F(ServerTest, BadRequestsGetTheRight4xxAndTheServerKeepsServing) {
  ServerOptions so;
  so.max_body_bytes = 64 << 10;
  Start(so);
  httplib::Client c = Client();
  auto post = [&](const std::string& path, const std::string& body) {
    auto r = c.Post(path.c_str(), body, "application/json");
    EXPECT_TRUE(r) << path;
    json j = r ? json::parse(r->body, nullptr, false) : json();
    return std::make_pair(r ? r->status : 0, j);
  };
  auto created = post("/tlr/v1/sessions", "{}");
  ASSERT_EQ(created.first, 201);
  const std::string sid = created.second["session"];
  const std::string h0 = HashHex(TokenPrefixHash({}));
  auto next = [&](const std::string& append, const std::string& extra = "") {
    return post("/tlr/v1/next", R"({"session":")" + sid + R"(","base":0,"prefix_hash":")" + h0 +
                                    R"(","append":)" + append + extra + "}");
  };
  struct Case {
    std::pair<int, json> got;
    int status;
    std::string code;
  };
  std::vector<Case> cases = {
      {post("/tlr/v1/sessions", "{not json"), 400, "invalid_json"},
      {post("/tlr/v1/sessions", "[]"), 400, "invalid_request"},
      {post("/tlr/v1/next", "{not json"), 400, "invalid_json"},
      {post("/tlr/v1/next", "[1,2]"), 400, "invalid_request"},
      {post("/tlr/v1/next", std::string(100 << 10, ' ')), 413, "body_too_large"},
      {next("[1,-5]"), 400, "invalid_request"},
      {next("[1,99999999999]"), 400, "invalid_request"},
      {next("[1,1e300]"), 400, "invalid_request"},
      {next("[]"), 400, "invalid_request"},
      {next("\"abc\""), 400, "invalid_request"},
      {next("[1,2]", R"(,"base":"zero")"), 400, "invalid_request"},
      {next("[1,2]", R"(,"n":100000)"), 400, "invalid_request"},
      {next("[1,2]", R"(,"sampling":{"temperature":-1})"), 400, "invalid_request"},
      {post("/tlr/v1/next", R"({"session":"s-unknown","base":0,"prefix_hash":")" + h0 + R"(","append":[1]})"), 404, "unknown_session"},
      {post("/v1/completions", R"({"prompt":[1,2],"max_tokens":-5})"), 400, "invalid_request_error"},
      {post("/v1/completions", R"({"prompt":{"a":1}})"), 400, "invalid_request_error"},
      {post("/v1/chat/completions", R"({"messages":[{"role":"robot","content":"hi"}]})"), 400, "invalid_request_error"},
      {post("/nowhere", "{}"), 404, "not_found"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i].got.first, cases[i].status) << "case " << i;
    ASSERT_TRUE(cases[i].got.second.is_object() && cases[i].got.second.contains("error")) << "case " << i;
    EXPECT_EQ(cases[i].got.second["error"]["code"], cases[i].code) << "case " << i;
  }
  // Still serving, and the session still works.
  auto ok = next("[1,2,3]");
  EXPECT_EQ(ok.first, 200);
  EXPECT_EQ(Client().Get("/health")->status, 200);
  const std::string m = Client().Get("/metrics")->body;
  for (const char* family : {"tlr_http_requests_total{endpoint=\"/tlr/v1/next\",status=\"400\"}", "tlr_prefill_tokens_total",
                             "tlr_decode_tokens_total", "tlr_batch_sequences_bucket", "tlr_sessions", "tlr_kv_bytes",
                             "tlr_evictions_total", "tlr_http_request_seconds_bucket"}) {
    EXPECT_NE(m.find(family), std::string::npos) << family;
  }
}

TEST_F(ServerTest, ApiKeysAreRequiredExceptForHealth) {
  ServerOptions so;
  so.api_keys = {"alpha-key", "beta-key"};
  Start(so);
  httplib::Client c = Client();
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  c.set_bearer_token_auth("wrong");
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  c.set_bearer_token_auth("beta-key");
  EXPECT_EQ(c.Get("/v1/models")->status, 200);
  RemoteOptions o;
  o.http.url = url_;
  EXPECT_FALSE(RemoteLlm::Connect(o, slm_->tokenizer()).ok());
  o.http.api_key = "alpha-key";
  EXPECT_TRUE(RemoteLlm::Connect(o, slm_->tokenizer()).ok());
  // Non-loopback without a key is refused.
  ServerOptions wide;
  wide.host = "0.0.0.0";
  wide.port = 0;
  LlmServer open(engine_.get(), nullptr, wide);
  EXPECT_FALSE(open.Start().ok());
}

// Over HTTP, the client a prefix is shared within is the API key: a session of another key
// prefills the whole system prompt again, one of the same key copies it (timing.prefilled); so
// do the OpenAI endpoints' prompt caches (tlr.prefilled).
TEST_F(ServerTest, PrefixesAreSharedWithinAnApiKeyOnly) {
  ServerOptions so;
  so.api_keys = {"alpha-key", "beta-key", "gamma-key"};
  Start(so);
  const std::string system = "You answer questions about the world of the tharko and the fexko. Pick one.\n";
  auto prefilled = [&](const std::string& key, const std::string& question) -> int64_t {
    httplib::Client c = Client();
    c.set_bearer_token_auth(key);
    auto created = c.Post("/tlr/v1/sessions", "{}", "application/json");
    if (!created || created->status != 201) return -1;
    const std::string id = json::parse(created->body)["session"];
    const std::vector<int32_t> ids = slm_->tokenizer().Encode(system + "Question: " + question + "\nA. marsh\nB. stone\n", true);
    auto r = c.Post("/tlr/v1/next", json{{"session", id}, {"append", ids}, {"n", 1}}.dump(), "application/json");
    if (!r || r->status != 200) return -2;
    return json::parse(r->body)["timing"]["prefilled"].get<int64_t>() - static_cast<int64_t>(ids.size());
  };
  EXPECT_EQ(prefilled("alpha-key", "Where would you find a zinthar?"), 0);
  EXPECT_EQ(prefilled("beta-key", "Where would you find a fexko?"), 0) << "copied another key's prefix";
  EXPECT_LT(prefilled("alpha-key", "Where would you find a vorn?"), -16) << "the same key's prefix was not copied";
  // The OpenAI endpoints: a new prompt-cache slot copies from the same key's sessions only.
  auto completion_prefilled = [&](const std::string& key, const std::string& question) -> int64_t {
    httplib::Client c = Client();
    c.set_bearer_token_auth(key);
    const std::vector<int32_t> ids = slm_->tokenizer().Encode(system + "Question: " + question + "\nA. marsh\nB. stone\n", true);
    auto r = c.Post("/v1/completions", json{{"prompt", ids}, {"max_tokens", 1}, {"temperature", 0}}.dump(), "application/json");
    if (!r || r->status != 200) return -1000;
    return json::parse(r->body)["tlr"]["prefilled"].get<int64_t>() - static_cast<int64_t>(ids.size());
  };
  EXPECT_LT(completion_prefilled("beta-key", "Where would you find a plith?"), -16) << "beta's session was not copied";
  EXPECT_EQ(completion_prefilled("gamma-key", "Where would you find a plith?"), 0) << "copied another key's cache";
}

// With API keys a native session answers to the key that created it alone: another key that
// learns its id can neither read its stored replies, its length, nor use or delete it.
TEST_F(ServerTest, SessionsAnswerToTheirOwnApiKeyOnly) {
  ServerOptions so;
  so.api_keys = {"alpha-key", "beta-key"};
  Start(so);
  httplib::Client a = Client(), b = Client();
  a.set_bearer_token_auth("alpha-key");
  b.set_bearer_token_auth("beta-key");
  auto created = a.Post("/tlr/v1/sessions", "{}", "application/json");
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 201);
  const std::string id = json::parse(created->body)["session"];
  const std::vector<int32_t> ids = slm_->tokenizer().Encode("Where would you find a zinthar?", true);
  const std::string first = json{{"session", id}, {"append", ids}, {"n", 3}, {"request_id", "r1"}}.dump();
  auto mine = a.Post("/tlr/v1/next", first, "application/json");
  ASSERT_TRUE(mine);
  ASSERT_EQ(mine->status, 200) << mine->body;
  // Beta replays alpha's request id, asks what the session holds (a wrong base), generates, deletes.
  for (const std::string& body :
       {first, json{{"session", id}, {"base", 1}, {"prefix_hash", "0123456789abcdef"}, {"append", {5}}, {"n", 1}}.dump(),
        json{{"session", id}, {"append", {5}}, {"n", 1}}.dump()}) {
    auto r = b.Post("/tlr/v1/next", body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << body << " -> " << r->body;
    EXPECT_EQ(r->body.find("held"), std::string::npos) << r->body;
  }
  auto del = b.Delete("/tlr/v1/sessions/" + id);
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 404);
  // Alpha's session is as it was: its replay is the stored reply, its next call continues.
  auto again = a.Post("/tlr/v1/next", first, "application/json");
  ASSERT_TRUE(again);
  ASSERT_EQ(again->status, 200) << again->body;
  EXPECT_TRUE(json::parse(again->body)["replayed"].get<bool>());
  EXPECT_EQ(json::parse(again->body)["tokens"], json::parse(mine->body)["tokens"]);
  auto own_del = a.Delete("/tlr/v1/sessions/" + id);
  ASSERT_TRUE(own_del);
  EXPECT_EQ(own_del->status, 204);
}

TEST_F(ServerTest, OpenAiCompletionsStreamAndStop) {
  Start();
  httplib::Client c = Client();
  const std::vector<int32_t> prompt = slm_->tokenizer().Encode(QaPrompt((*rows_)[0]));
  const std::string ids = json(prompt).dump();
  auto r = c.Post("/v1/completions", R"({"prompt":)" + ids + R"(,"max_tokens":12,"temperature":0,"logprobs":2})", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json full = json::parse(r->body);
  InProcessLlm ref(*llm_, 1, 1024);
  const std::vector<int32_t> want = ref.Next(prompt, 12, SamplerParams{})->tokens;
  EXPECT_EQ(full["tlr"]["token_ids"].get<std::vector<int32_t>>(), want);
  const std::string text = full["choices"][0]["text"];
  EXPECT_EQ(text, llm_->tokenizer().Decode(want));
  EXPECT_EQ(full["choices"][0]["logprobs"]["tokens"].size(), want.size());
  EXPECT_EQ(full["usage"]["completion_tokens"], 12);
  // Streaming gives the same text in SSE events, then [DONE].
  auto s = c.Post("/v1/completions", R"({"prompt":)" + ids + R"(,"max_tokens":12,"temperature":0,"stream":true})", "application/json");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200);
  EXPECT_NE(s->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  // The stream's text, and its usage chunk (choices empty) if any.
  auto read_stream = [](const std::string& body, std::string* streamed, json* usage) {
    bool done = false;
    std::string line;
    std::istringstream in(body);
    while (std::getline(in, line)) {
      if (line.rfind("data: ", 0) != 0) continue;
      if (line == "data: [DONE]") {
        done = true;
        continue;
      }
      const json chunk = json::parse(line.substr(6));
      EXPECT_FALSE(done) << "a chunk after [DONE]";
      if (chunk.contains("usage")) {
        EXPECT_TRUE(chunk["choices"].empty()) << "usage rides on a chunk with choices: " << line;
        *usage = chunk["usage"];
        continue;
      }
      *streamed += chunk["choices"][0]["text"].get<std::string>();
    }
    return done;
  };
  std::string streamed;
  json usage;
  EXPECT_TRUE(read_stream(s->body, &streamed, &usage));
  EXPECT_EQ(streamed, text);
  EXPECT_TRUE(usage.is_null()) << "usage sent without stream_options.include_usage";
  // With include_usage: the same text, then a chunk of its own with usage (as OpenAI and vLLM).
  auto su = c.Post("/v1/completions", R"({"prompt":)" + ids + R"(,"max_tokens":12,"temperature":0,"stream":true,)" +
                                          R"("stream_options":{"include_usage":true}})", "application/json");
  ASSERT_TRUE(su);
  std::string streamed2;
  EXPECT_TRUE(read_stream(su->body, &streamed2, &usage));
  EXPECT_EQ(streamed2, text);
  EXPECT_EQ(usage["completion_tokens"], 12) << su->body;
  // max_tokens 0 streamed is a stream still: its finish chunk, usage when asked, [DONE].
  auto s0 = c.Post("/v1/completions", R"({"prompt":)" + ids + R"(,"max_tokens":0,"stream":true,)" +
                                          R"("stream_options":{"include_usage":true}})", "application/json");
  ASSERT_TRUE(s0);
  EXPECT_NE(s0->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  std::string streamed0;
  EXPECT_TRUE(read_stream(s0->body, &streamed0, &usage)) << s0->body;
  EXPECT_EQ(streamed0, "");
  EXPECT_EQ(usage["completion_tokens"], 0) << s0->body;
  EXPECT_NE(s0->body.find(R"("finish_reason":"length")"), std::string::npos) << s0->body;
  // A stop string cuts the text before it.
  ASSERT_GT(text.size(), 4u);
  const std::string stop = text.substr(text.size() / 2, 3);
  auto t = c.Post("/v1/completions", R"({"prompt":)" + ids + R"(,"max_tokens":12,"temperature":0,"stop":)" + json(stop).dump() + "}", "application/json");
  ASSERT_TRUE(t);
  const json cut = json::parse(t->body);
  EXPECT_EQ(cut["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
}

// A batch of token-id prompts in vLLM's shape: one choice per prompt, in order, each with its own
// prompt_logprobs (null first, then a dict keyed by token id holding the prompt's token); usage
// sums the batch; each choice equals the prompt sent alone.
TEST_F(ServerTest, OpenAiCompletionsTakeABatchOfPrompts) {
  Start();
  httplib::Client c = Client();
  const std::vector<int32_t> a = slm_->tokenizer().Encode(QaPrompt((*rows_)[0]));
  const std::vector<int32_t> b = slm_->tokenizer().Encode(QaPrompt((*rows_)[1]));
  const json body = {{"prompt", {a, b}}, {"max_tokens", 4}, {"temperature", 0}, {"prompt_logprobs", 1}};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json out = json::parse(r->body);
  ASSERT_EQ(out["choices"].size(), 2u);
  InProcessLlm ref(*llm_, 1, 1024);
  for (int i = 0; i < 2; ++i) {
    const std::vector<int32_t>& prompt = i == 0 ? a : b;
    const json& choice = out["choices"][i];
    EXPECT_EQ(choice["index"], i);
    EXPECT_EQ(choice["tlr"]["token_ids"].get<std::vector<int32_t>>(), ref.Next(prompt, 4, SamplerParams{})->tokens);
    const json& plp = choice["prompt_logprobs"];
    ASSERT_EQ(plp.size(), prompt.size());
    EXPECT_TRUE(plp[0].is_null());
    for (size_t k = 1; k < prompt.size(); ++k) {
      ASSERT_TRUE(plp[k].contains(std::to_string(prompt[k]))) << i << " " << k;
      EXPECT_TRUE(plp[k][std::to_string(prompt[k])].contains("logprob"));
    }
    // The same prompt alone gives the same choice.
    const json alone = {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}, {"prompt_logprobs", 1}};
    auto one = c.Post("/v1/completions", alone.dump(), "application/json");
    ASSERT_TRUE(one && one->status == 200);
    const json single = json::parse(one->body);
    EXPECT_EQ(single["choices"][0]["text"], choice["text"]);
    EXPECT_EQ(single["choices"][0]["prompt_logprobs"], plp);
  }
  EXPECT_EQ(out["usage"]["prompt_tokens"], a.size() + b.size());
  EXPECT_EQ(out["usage"]["completion_tokens"], 8);
  // What a batch cannot be: streamed, or hold an empty prompt; both say so.
  json streamed = {{"prompt", {a, b}}, {"max_tokens", 2}, {"stream", true}};
  auto s = c.Post("/v1/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->status, 400);
  EXPECT_NE(s->body.find("cannot be streamed"), std::string::npos) << s->body;
  json empty = {{"prompt", {a, std::vector<int32_t>{}}}, {"max_tokens", 2}};
  auto e = c.Post("/v1/completions", empty.dump(), "application/json");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_NE(e->body.find("'prompt'[1] is empty"), std::string::npos) << e->body;
}

TEST_F(ServerTest, TlsWithVerifiedCertificate) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) GTEST_SKIP() << "openssl command not installed";
  TempDir dir("tlr_tls_test");
  const std::string cert = dir.File("cert.pem"), key = dir.File("key.pem");
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 "
                          "-addext subjectAltName=IP:127.0.0.1 -keyout " + key + " -out " + cert + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ServerOptions so;
  so.tls_cert = cert;
  so.tls_key = key;
  Start(so);
  RemoteOptions o;
  o.http.url = "https://127.0.0.1:" + std::to_string(server_->port());
  o.http.ca_file = cert;
  auto remote = RemoteLlm::Connect(o, slm_->tokenizer());
  ASSERT_TRUE(remote.ok()) << remote.status().message();
  EXPECT_TRUE((*remote)->warning().empty()) << (*remote)->warning();
  InProcessLlm local(*llm_, 1, 1024);
  EXPECT_EQ(Generate(remote->get(), (*rows_)[1], 0.95f).ids, Generate(&local, (*rows_)[1], 0.95f).ids);
  // With TLS a chunked body (which httplib's own model would read without --max-body) is refused.
  httplib::SSLClient tls("127.0.0.1", server_->port());
  tls.set_ca_cert_path(cert.c_str());
  auto chunked = tls.Post("/tlr/v1/next",
                          [](size_t, httplib::DataSink& sink) {
                            sink.write("{}", 2);
                            sink.done();
                            return true;
                          },
                          "application/json");
  // The server answers 411 as soon as it has the headers and drops the rest, so the client may
  // still be writing the 2-byte body when the connection goes: a write error means the same
  // refusal (a server that read chunked bodies would have taken those 2 bytes and answered).
  if (chunked || chunked.error() != httplib::Error::Write) {
    ASSERT_TRUE(chunked) << httplib::to_string(chunked.error());
    EXPECT_EQ(chunked->status, 411) << chunked->body;
  }
  auto health = tls.Get("/health");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  // Without the CA the certificate is not trusted: a clear error, not a silent fallback.
  o.http.ca_file.clear();
  auto untrusted = RemoteLlm::Connect(o, slm_->tokenizer());
  ASSERT_FALSE(untrusted.ok());
  EXPECT_NE(untrusted.status().message().find("--ca-file"), std::string::npos) << untrusted.status().message();
  // Plain HTTP to the TLS port fails too, and so does https to a plain server.
  o.http.url = "http://127.0.0.1:" + std::to_string(server_->port());
  auto plain = RemoteLlm::Connect(o, slm_->tokenizer());
  EXPECT_TRUE(!plain.ok() || !(*plain)->Next(std::vector<int32_t>{1, 2}, 1, SamplerParams{}).ok());
  // A key that does not match is refused at start.
  ServerOptions mismatched;
  mismatched.port = 0;
  mismatched.tls_cert = cert;
  mismatched.tls_key = cert;
  LlmServer bad(engine_.get(), nullptr, mismatched);
  EXPECT_FALSE(bad.Start().ok());
}

}  // namespace
}  // namespace tlr
