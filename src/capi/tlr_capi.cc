// The C API (include/tlr.h) over the device session (capi layer). Every entry point catches
// what C++ may throw (allocation failures) and turns errors into a tlr_status plus the calling
// thread's last-error message; no exception and no C++ type crosses the boundary. Built into
// libtlr.so, which exports only the tlr_* functions (tlr.map).
#include "tlr.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "capi/http_hook.h"
#include "device/session/context_file.h"
#include "device/session/context_pool.h"
#include "device/session/device_session.h"
#include "model/chat_messages.h"
#include "model/packed_gguf.h"
#include "ops/thread_pool.h"

#ifndef TLR_VERSION_STRING
#define TLR_VERSION_STRING "unknown"
#endif

struct tlr_device {
  tlr::DeviceModels models;
  std::unique_ptr<tlr::ThreadPool> pool;
  std::unique_ptr<tlr::DeviceContextPool> contexts;  // the prompt cache
  // One generation at a time: `generating` under `mu`; cancel only while generating.
  std::mutex mu;
  bool generating = false;
  std::atomic<bool> cancel{false};
};

struct tlr_llm {
  tlr::LlmTarget target;
  std::shared_ptr<tlr::HookGuard> hook_guard;  // with an http_hook: closed at tlr_llm_free
};

namespace {

thread_local std::string g_last_error;

int Fail(int code, std::string message) {
  g_last_error = std::move(message);
  return code;
}
int Ok() {
  g_last_error.clear();
  return TLR_OK;
}

// Runs `body` (returning a tlr_status), turning exceptions into TLR_ERR_INTERNAL. Only
// std::exception is caught, not everything: a thread ended inside a callback (pthread_exit, or
// Python ending a thread at interpreter exit) unwinds through here with abi::__forced_unwind,
// which must go on (swallowing it aborts the process; naming it in a catch is undefined).
template <typename F>
int Guard(F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(TLR_ERR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return Fail(TLR_ERR_INTERNAL, std::string("internal error: ") + e.what());
  }
}

// A caller's parameter struct of given->struct_size bytes read as the library's T: fields past
// that size (a caller built against an older header) keep their defaults. NULL: the defaults.
// False when struct_size was never set (the caller skipped the _init function).
template <typename T>
bool ReadParams(const T* given, void (*init)(T*), T* out) {
  init(out);
  if (!given) return true;
  // Every version of a struct is a whole number of its alignment (8); a size between would cut
  // a pointer or a double in two (a caller that set struct_size by hand).
  if (given->struct_size < sizeof(size_t) || given->struct_size % alignof(T) != 0) return false;
  std::memcpy(out, given, std::min(sizeof(T), given->struct_size));
  out->struct_size = sizeof(T);
  return true;
}
#define TLR_READ_PARAMS(type, given, out)                                                        \
  type out;                                                                                      \
  if (!ReadParams(given, type##_init, &out)) {                                                   \
    return Fail(TLR_ERR_INVALID_ARGUMENT, #type ".struct_size is not set or not a size of the struct: call " \
                                          #type "_init");                                          \
  }

std::string Str(const char* s) { return s ? s : ""; }

// Copies into a fixed char array, truncated and NUL-terminated.
template <size_t N>
void CopyString(char (&dst)[N], const std::string& s) {
  const size_t n = std::min(N - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

void FillStats(const tlr::DeviceRunResult& r, float threshold, int stop, tlr_stats* out) {
  tlr_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  const tlr::DecodeStats& d = r.stats;
  s.prompt_tokens = d.prompt_tokens;
  s.generated = d.generated;
  s.routed = d.routed;
  s.fallbacks = d.fallbacks;
  s.llm_calls = d.llm_calls;
  s.stop = stop;
  s.threshold = threshold;
  s.ttft_ms = d.ttft_s * 1e3;
  s.tbt_ms = d.tbt_s * 1e3;
  s.total_ms = d.total_s * 1e3;
  s.slm_ms = (d.slm_prefill_s + d.slm_decode_s) * 1e3;
  s.router_ms = d.router_s * 1e3;
  s.llm_ms = d.llm_s * 1e3;
  s.stall_ms = d.stall_s * 1e3;
  s.spec_resolved = d.spec_resolved;
  s.spec_hits = d.spec_hits;
  s.spec_branch_hits = d.spec_branch_hits;
  s.lookahead_used = d.lookahead_used;
  s.wasted_slm_steps = d.wasted_slm_steps;
  s.cancelled_calls = d.cancelled_calls;
  s.llm_prefilled = d.llm_work.prefilled;
  s.llm_generated = d.llm_work.generated;
  s.llm_forward_ms = d.llm_work.forward_s < 0 ? -1.0 : d.llm_work.forward_s * 1e3;
  s.prompt_reused = d.prompt_reused;
  if (r.remote) {
    s.http_requests = r.remote_stats.http_requests;
    s.retries = r.remote_stats.retries;
    s.resyncs = r.remote_stats.resyncs;
    s.failed_calls = r.remote_stats.failed_calls;
    CopyString(s.llm_failure, r.remote_stats.FailureSummary());
  }
  const size_t n = std::min(sizeof s, out->struct_size);
  std::memcpy(out, &s, n);
  out->struct_size = n;
}

tlr::DecodeOptions ToDecodeOptions(const tlr_generate_params& p, const tlr::Router& router,
                                   const std::atomic<bool>* cancel) {
  tlr::DecodeOptions d;
  d.mode = p.mode == TLR_MODE_SMALL_ONLY   ? tlr::DecodeMode::kSmallOnly
           : p.mode == TLR_MODE_LARGE_ONLY ? tlr::DecodeMode::kLargeOnly
                                           : tlr::DecodeMode::kJoint;
  d.threshold = p.threshold < 0 ? router.info().threshold : p.threshold;
  d.route_span = p.span;
  d.max_tokens = p.max_tokens;
  d.sampling.temperature = p.temperature;
  d.sampling.top_k = p.top_k;
  d.sampling.top_p = p.top_p;
  d.sampling.min_p = p.min_p;
  d.sampling.repeat_penalty = p.repeat_penalty;
  d.sampling.repeat_last_n = p.repeat_last_n;
  d.sampling.seed = p.seed;
  d.pipeline.enabled = p.pipeline != 0;
  d.pipeline.depth = p.spec_depth;
  d.pipeline.branches = p.spec_branches;
  d.pipeline.lookahead = p.lookahead;
  d.pipeline.llm_budget = p.llm_budget;
  d.sim_slm_s = p.sim_slm_ms / 1e3;
  d.policy = p.policy == TLR_POLICY_COST ? tlr::RoutePolicy::kCost : tlr::RoutePolicy::kThreshold;
  d.price_ratio = p.price_ratio;
  d.cost_budget = p.cost_budget;
  d.cancel = cancel;
  return d;
}

// The body of tlr_generate and tlr_generate_ids once the prompt is ids.
int Generate(tlr_device* dev, const tlr_llm* llm, const std::vector<int32_t>& ids, const tlr_generate_params& p,
             tlr_token_callback on_token, void* user_data, tlr_stats* stats) {
  if (p.mode < TLR_MODE_JOINT || p.mode > TLR_MODE_LARGE_ONLY) {
    return Fail(TLR_ERR_INVALID_ARGUMENT, "unknown mode " + std::to_string(p.mode) + " (tlr_mode: 0, 1 or 2)");
  }
  if (p.policy != TLR_POLICY_THRESHOLD && p.policy != TLR_POLICY_COST) {
    return Fail(TLR_ERR_INVALID_ARGUMENT, "unknown policy " + std::to_string(p.policy) + " (tlr_policy: 0 or 1)");
  }
  if (p.mode != TLR_MODE_SMALL_ONLY && !llm) {
    return Fail(TLR_ERR_INVALID_ARGUMENT, "joint and large_only modes need an LLM (tlr_llm_open)");
  }
  if (p.threshold > 1.0f || p.threshold != p.threshold) {
    return Fail(TLR_ERR_INVALID_ARGUMENT, "threshold " + std::to_string(p.threshold) +
                                              " is outside [0, 1] (negative: the router's recommended one)");
  }
  const tlr::Model& slm = *dev->models.slm;
  {
    std::lock_guard<std::mutex> lock(dev->mu);
    if (dev->generating) return Fail(TLR_ERR_BUSY, "the device is already generating (one generation at a time)");
    dev->generating = true;
    dev->cancel.store(false);
  }
  struct Done {
    tlr_device* dev;
    ~Done() {
      std::lock_guard<std::mutex> lock(dev->mu);
      dev->generating = false;
    }
  } done{dev};
  const tlr::DecodeOptions d = ToDecodeOptions(p, *dev->models.router, &dev->cancel);
  bool stopped_by_callback = false;
  auto on_event = [&](const tlr::TokenEvent& ev) {
    if (!on_token) return true;
    tlr_token t;
    t.struct_size = sizeof t;
    t.id = ev.id;
    t.text = ev.text.c_str();
    t.text_len = ev.text.size();
    t.source = ev.source == tlr::TokenSource::kLlm        ? TLR_SOURCE_LLM
               : ev.source == tlr::TokenSource::kFallback ? TLR_SOURCE_FALLBACK
                                                           : TLR_SOURCE_SLM;
    t.confidence = ev.confidence;
    t.end = ev.end ? 1 : 0;
    t.slm_ms = ev.slm_s * 1e3;
    t.router_ms = ev.router_s * 1e3;
    t.llm_ms = ev.llm_s * 1e3;
    t.stall_ms = ev.stall_s * 1e3;
    t.at_ms = ev.at_s * 1e3;
    t.llm_error = ev.llm_error.c_str();
    if (on_token(&t, user_data) != 0) {
      stopped_by_callback = true;
      return false;
    }
    return true;
  };
  tlr::DeviceRunStep step = tlr::DeviceRunStep::kOptions;
  std::unique_ptr<tlr::DeviceContext> context = dev->contexts->Take(ids);
  auto run = tlr::RunDeviceGeneration(slm, dev->models.router.get(), llm ? &llm->target : nullptr,
                                      dev->pool.get(), ids, d, on_event, {}, &step, context.get());
  dev->contexts->Give(std::move(context));
  if (!run.ok()) {
    const int code = step == tlr::DeviceRunStep::kOptions    ? TLR_ERR_INVALID_ARGUMENT
                     : step == tlr::DeviceRunStep::kLlmSetup ? TLR_ERR_LLM
                                                             : TLR_ERR_GENERATE;
    return Fail(code, run.status().message());
  }
  int stop = TLR_STOP_MAX_TOKENS;
  if (run->stats.stop == "eos") stop = TLR_STOP_EOS;
  if (run->stats.stop == "stopped") stop = stopped_by_callback ? TLR_STOP_CALLBACK : TLR_STOP_CANCELLED;
  if (stats) FillStats(*run, d.threshold, stop, stats);
  return Ok();
}

// The rendered prompt of a C message array (checked).
int MessagesToIds(tlr_device* device, const tlr_message* messages, size_t n_messages, const char* fn,
                  std::vector<int32_t>* ids) {
  if (!messages && n_messages > 0) return Fail(TLR_ERR_INVALID_ARGUMENT, std::string(fn) + ": NULL argument");
  if (n_messages == 0) return Fail(TLR_ERR_INVALID_ARGUMENT, std::string(fn) + ": the conversation has no messages");
  if (n_messages > tlr::kMaxChatMessages) {
    return Fail(TLR_ERR_INVALID_ARGUMENT, std::string(fn) + ": " + std::to_string(n_messages) + " messages; at most " +
                                              std::to_string(tlr::kMaxChatMessages));
  }
  std::vector<tlr::ChatMessage> msgs;
  for (size_t i = 0; i < n_messages; ++i) {
    const tlr_message& m = messages[i];
    if (!m.role || !m.content) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, std::string(fn) + ": message " + std::to_string(i) + " has a NULL role or content");
    }
    std::string role = m.role;
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant") {
      return Fail(TLR_ERR_INVALID_ARGUMENT, std::string(fn) + ": message " + std::to_string(i) + ": unknown role '" +
                                                role + "' (system, developer, user, assistant)");
    }
    msgs.push_back({std::move(role), m.content});
  }
  auto r = tlr::EncodeMessages(*device->models.slm, msgs);
  if (!r.ok()) return Fail(TLR_ERR_INVALID_ARGUMENT, r.status().message());
  *ids = std::move(r).value();
  return TLR_OK;
}


}  // namespace

extern "C" {

int tlr_api_version(void) { return TLR_API_VERSION; }
const char* tlr_version(void) { return TLR_VERSION_STRING; }

const char* tlr_status_name(int status) {
  switch (status) {
    case TLR_OK: return "TLR_OK";
    case TLR_ERR_INVALID_ARGUMENT: return "TLR_ERR_INVALID_ARGUMENT";
    case TLR_ERR_LOAD: return "TLR_ERR_LOAD";
    case TLR_ERR_INCOMPATIBLE: return "TLR_ERR_INCOMPATIBLE";
    case TLR_ERR_LLM: return "TLR_ERR_LLM";
    case TLR_ERR_BUSY: return "TLR_ERR_BUSY";
    case TLR_ERR_BUFFER_TOO_SMALL: return "TLR_ERR_BUFFER_TOO_SMALL";
    case TLR_ERR_GENERATE: return "TLR_ERR_GENERATE";
    case TLR_ERR_INTERNAL: return "TLR_ERR_INTERNAL";
    default: return "TLR_ERR_UNKNOWN";
  }
}

const char* tlr_last_error(void) { return g_last_error.c_str(); }

void tlr_device_params_init(tlr_device_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->n_threads = 1;
  p->kv_type = "f16";
  p->kv_slots = 4;
  p->kv_budget_mb = 1024;
  p->n_ctx = 4096;
  p->seed = 42;
  p->weight_cache = "auto";
}

int tlr_device_open(const tlr_device_params* params, tlr_device** out) {
  return Guard([&] {
    if (!out) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_device_open: out is NULL");
    *out = nullptr;
    if (!params) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_device_open: params is NULL");
    TLR_READ_PARAMS(tlr_device_params, params, p);
    if (p.n_threads < 1 || p.n_threads > 256) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "n_threads " + std::to_string(p.n_threads) + " is outside [1, 256]");
    }
    auto opts = tlr::ModelOptionsForKvType(Str(p.kv_type));
    if (!opts.ok()) return Fail(TLR_ERR_INVALID_ARGUMENT, opts.status().message());
    if (!Str(p.weight_cache).empty()) opts->weight_cache = Str(p.weight_cache);
    tlr::DeviceModels::Step step = tlr::DeviceModels::Step::kSlm;
    auto models = tlr::DeviceModels::Load(Str(p.slm_path), Str(p.router), *opts, p.seed, &step);
    if (!models.ok()) {
      return Fail(step == tlr::DeviceModels::Step::kCompatibility ? TLR_ERR_INCOMPATIBLE : TLR_ERR_LOAD,
                  models.status().message());
    }
    if (p.kv_slots < 0 || p.kv_slots > 1024) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "kv_slots " + std::to_string(p.kv_slots) + " is outside [0, 1024]");
    }
    if (p.kv_budget_mb < 0 || p.kv_budget_mb > (int64_t{1} << 30)) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "kv_budget_mb " + std::to_string(p.kv_budget_mb) + " is out of range");
    }
    if (p.n_ctx < 1 || p.n_ctx > (int64_t{1} << 24)) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "n_ctx " + std::to_string(p.n_ctx) + " is outside [1, 16777216]");
    }
    auto dev = std::make_unique<tlr_device>();
    dev->models = std::move(models).value();
    dev->pool = std::make_unique<tlr::ThreadPool>(p.n_threads);
    tlr::ContextPoolOptions co;
    co.max_slots = p.kv_slots;
    co.budget_bytes = static_cast<uint64_t>(p.kv_budget_mb) << 20;
    co.n_ctx = p.n_ctx;
    const tlr::Model& slm = *dev->models.slm;
    dev->contexts = std::make_unique<tlr::DeviceContextPool>(co, tlr::KvCache::BytesPerPosition(slm.config(), slm.kv_type()));
    *out = dev.release();
    return Ok();
  });
}

void tlr_device_free(tlr_device* device) { delete device; }

int tlr_device_get_info(const tlr_device* device, tlr_device_info* info) {
  return Guard([&] {
    if (!device || !info) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_device_get_info: NULL argument");
    if (info->struct_size < sizeof(size_t)) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_device_get_info: set info->struct_size = sizeof(tlr_device_info)");
    }
    tlr_device_info i;
    std::memset(&i, 0, sizeof i);
    i.struct_size = sizeof i;
    const tlr::Tokenizer& tok = device->models.slm->tokenizer();
    i.n_vocab = tok.n_vocab();
    i.bos = tok.bos();
    i.eos = tok.eos();
    i.n_embd = device->models.slm->config().n_embd;
    i.router_threshold = device->models.router->info().threshold;
    CopyString(i.router_kind, std::string(tlr::RouterKindName(device->models.router->kind())));
    const size_t n = std::min(sizeof i, info->struct_size);
    std::memcpy(info, &i, n);
    info->struct_size = n;
    return Ok();
  });
}

int tlr_tokenize(const tlr_device* device, const char* text, size_t text_len, int add_special, int parse_special,
                 int32_t* ids, size_t capacity, size_t* n_ids) {
  return Guard([&] {
    if (!device || !n_ids || (!text && text_len > 0) || (!ids && capacity > 0)) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_tokenize: NULL argument");
    }
    const std::vector<int32_t> v = device->models.slm->tokenizer().Encode(
        std::string_view(text ? text : "", text_len), add_special != 0, parse_special != 0);
    *n_ids = v.size();
    if (v.size() > capacity) {
      return Fail(TLR_ERR_BUFFER_TOO_SMALL, "tlr_tokenize: " + std::to_string(v.size()) + " ids do not fit in " +
                                                std::to_string(capacity));
    }
    std::copy(v.begin(), v.end(), ids);
    return Ok();
  });
}

int tlr_detokenize(const tlr_device* device, const int32_t* ids, size_t n_ids, int render_special, char* buf,
                   size_t capacity, size_t* text_len) {
  return Guard([&] {
    if (!device || !text_len || (!ids && n_ids > 0) || (!buf && capacity > 0)) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_detokenize: NULL argument");
    }
    const tlr::Tokenizer& tok = device->models.slm->tokenizer();
    for (size_t i = 0; i < n_ids; ++i) {
      if (!tok.IsValidId(ids[i])) {
        return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_detokenize: id " + std::to_string(ids[i]) + " is outside the vocabulary");
      }
    }
    const std::string s = tok.Decode(std::span<const int32_t>(ids, n_ids), render_special != 0);
    *text_len = s.size();
    if (s.size() + 1 > capacity) {
      return Fail(TLR_ERR_BUFFER_TOO_SMALL, "tlr_detokenize: " + std::to_string(s.size() + 1) +
                                                " bytes (with the NUL) do not fit in " + std::to_string(capacity));
    }
    std::memcpy(buf, s.data(), s.size());
    buf[s.size()] = '\0';
    return Ok();
  });
}

void tlr_llm_params_init(tlr_llm_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->backend = "tlr";
  p->verify_tls = 1;
  p->timeout_s = 2;
  p->retries = 2;
  p->retry_after_s = 1;
  p->connections = 4;
  p->n_threads = 1;
  p->kv_type = "f16";
  p->weight_cache = "auto";
}

int tlr_llm_open(const tlr_llm_params* params, tlr_llm** out) {
  return Guard([&] {
    if (!out) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_llm_open: out is NULL");
    *out = nullptr;
    if (!params) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_llm_open: params is NULL");
    TLR_READ_PARAMS(tlr_llm_params, params, p);
    const std::string path = Str(p.model_path), url = Str(p.server_url);
    if (path.empty() == url.empty()) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_llm_open: give exactly one of model_path and server_url");
    }
    if (p.n_threads < 1 || p.n_threads > 256) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "n_threads " + std::to_string(p.n_threads) + " is outside [1, 256]");
    }
    if (!path.empty() && p.http_hook) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_llm_open: http_hook is for a server_url, not a model_path");
    }
    if (!(p.timeout_s > 0 && p.timeout_s <= 3600) || p.retries < 0 || p.retries > 100 ||
        !(p.retry_after_s >= 0 && p.retry_after_s <= 3600) || p.connections < 1 || p.connections > 64 ||
        !(p.sim_rtt_ms >= 0 && p.sim_rtt_ms <= 600000) || !(p.sim_jitter_ms >= 0 && p.sim_jitter_ms <= 600000)) {
      return Fail(TLR_ERR_INVALID_ARGUMENT,
                  "tlr_llm_open: timeout_s (0, 3600], retries [0, 100], retry_after_s [0, 3600], connections "
                  "[1, 64], sim_rtt_ms and sim_jitter_ms [0, 600000]");
    }
    auto llm = std::make_unique<tlr_llm>();
    tlr::LlmConfig& config = llm->target.config;
    config.threads = p.n_threads;
    config.sim_rtt_s = p.sim_rtt_ms / 1e3;
    config.sim_jitter_s = p.sim_jitter_ms / 1e3;
    if (!path.empty()) {
      auto opts = tlr::ModelOptionsForKvType(Str(p.kv_type));
      if (!opts.ok()) return Fail(TLR_ERR_INVALID_ARGUMENT, opts.status().message());
      if (!Str(p.weight_cache).empty()) opts->weight_cache = Str(p.weight_cache);
      auto m = tlr::LoadModelAs("LLM", path, *opts);
      if (!m.ok()) return Fail(TLR_ERR_LOAD, m.status().message());
      llm->target.model = std::move(m).value();
    } else {
      if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0) {
        return Fail(TLR_ERR_INVALID_ARGUMENT, "server_url '" + url + "' must start with http:// or https://");
      }
      tlr::RemoteOptions& r = config.remote;
      config.llm_tokenizer = Str(p.llm_tokenizer);
      auto protocol = tlr::ParseRemoteProtocol(p.backend ? p.backend : "tlr");
      if (!protocol.ok()) return Fail(TLR_ERR_INVALID_ARGUMENT, protocol.status().message());
      r.protocol = *protocol;
      r.http.url = url;
      r.http.api_key = Str(p.api_key);
      r.model = Str(p.server_model);
      r.http.ca_file = Str(p.ca_file);
      r.http.verify_tls = p.verify_tls != 0;
      r.http.timeout_s = p.timeout_s;
      r.http.retries = p.retries;
      r.retry_after_s = p.retry_after_s;
      r.max_in_flight = p.connections;
      if (p.http_hook) {
        if (p.http_hook->struct_size < sizeof(tlr_http_hook) || !p.http_hook->send) {
          return Fail(TLR_ERR_INVALID_ARGUMENT,
                      "tlr_llm_open: http_hook needs struct_size = sizeof(tlr_http_hook) and a send function");
        }
        llm->hook_guard = std::make_shared<tlr::HookGuard>();
        r.http.stack = std::make_shared<tlr::HookHttpStack>(*p.http_hook, llm->hook_guard);
      }
      // What can be checked without the network is checked now, not at every generation.
      if (tlr::Status v = tlr::HttpTransport::Validate(r.http); !v.ok()) {
        return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_llm_open: " + v.message());
      }
      if (!config.llm_tokenizer.empty() && config.llm_tokenizer != "server") {
        std::error_code ec;
        if (!std::filesystem::is_regular_file(config.llm_tokenizer, ec)) {
          return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_llm_open: llm_tokenizer '" + config.llm_tokenizer +
                                                    "' is not a file (a GGUF or tokenizer.json), nor \"server\"");
        }
      }
    }
    *out = llm.release();
    return Ok();
  });
}

void tlr_llm_free(tlr_llm* llm) {
  if (!llm) return;
  // A device's prompt cache may keep this LLM's backend (and calls of it in flight) for a while:
  // its hook is not called again once this returns (calls into it under way are waited for).
  if (llm->hook_guard) llm->hook_guard->Close();
  delete llm;
}

void tlr_generate_params_init(tlr_generate_params* p) {
  if (!p) return;
  std::memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  const tlr::DecodeOptions d;
  const tlr::SamplerParams& s = d.sampling;
  p->mode = TLR_MODE_JOINT;
  p->threshold = -1.0f;
  p->span = d.route_span;
  p->max_tokens = d.max_tokens;
  p->temperature = s.temperature;
  p->top_k = s.top_k;
  p->top_p = s.top_p;
  p->min_p = s.min_p;
  p->repeat_penalty = s.repeat_penalty;
  p->repeat_last_n = s.repeat_last_n;
  p->seed = s.seed;
  p->pipeline = d.pipeline.enabled ? 1 : 0;
  p->spec_depth = d.pipeline.depth;
  p->spec_branches = d.pipeline.branches;
  p->lookahead = d.pipeline.lookahead;
  p->sim_slm_ms = 0;
  p->llm_budget = d.pipeline.llm_budget;
  p->policy = TLR_POLICY_THRESHOLD;
  p->price_ratio = d.price_ratio;
  p->cost_budget = d.cost_budget;
}

int tlr_generate_ids(tlr_device* device, const tlr_llm* llm, const int32_t* prompt, size_t n_prompt,
                     const tlr_generate_params* params, tlr_token_callback on_token, void* user_data,
                     tlr_stats* stats) {
  return Guard([&] {
    if (!device || (!prompt && n_prompt > 0)) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_generate_ids: NULL argument");
    if (stats && stats->struct_size < sizeof(size_t)) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_generate_ids: set stats->struct_size = sizeof(tlr_stats)");
    }
    if (n_prompt == 0) return Fail(TLR_ERR_INVALID_ARGUMENT, "the prompt is empty");
    const int32_t n_vocab = device->models.slm->tokenizer().n_vocab();
    for (size_t i = 0; i < n_prompt; ++i) {
      if (prompt[i] < 0 || prompt[i] >= n_vocab) {
        return Fail(TLR_ERR_INVALID_ARGUMENT, "prompt token " + std::to_string(prompt[i]) + " (at " +
                                                  std::to_string(i) + ") is outside the vocabulary of " +
                                                  std::to_string(n_vocab));
      }
    }
    TLR_READ_PARAMS(tlr_generate_params, params, p);
    return Generate(device, llm, std::vector<int32_t>(prompt, prompt + n_prompt), p, on_token, user_data, stats);
  });
}

int tlr_generate(tlr_device* device, const tlr_llm* llm, const char* prompt, const tlr_generate_params* params,
                 tlr_token_callback on_token, void* user_data, tlr_stats* stats) {
  return Guard([&] {
    if (!device || !prompt) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_generate: NULL argument");
    if (stats && stats->struct_size < sizeof(size_t)) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_generate: set stats->struct_size = sizeof(tlr_stats)");
    }
    TLR_READ_PARAMS(tlr_generate_params, params, p);
    auto ids = tlr::EncodePrompt(*device->models.slm, prompt, p.chat != 0);
    if (!ids.ok()) return Fail(TLR_ERR_INVALID_ARGUMENT, ids.status().message());
    return Generate(device, llm, *ids, p, on_token, user_data, stats);
  });
}

int tlr_generate_chat(tlr_device* device, const tlr_llm* llm, const tlr_message* messages, size_t n_messages,
                      const tlr_generate_params* params, tlr_token_callback on_token, void* user_data,
                      tlr_stats* stats) {
  return Guard([&] {
    if (!device) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_generate_chat: NULL argument");
    if (stats && stats->struct_size < sizeof(size_t)) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_generate_chat: set stats->struct_size = sizeof(tlr_stats)");
    }
    TLR_READ_PARAMS(tlr_generate_params, params, p);
    std::vector<int32_t> ids;
    if (int rc = MessagesToIds(device, messages, n_messages, "tlr_generate_chat", &ids); rc != TLR_OK) return rc;
    return Generate(device, llm, ids, p, on_token, user_data, stats);
  });
}

int tlr_conversation_save(tlr_device* device, const tlr_message* messages, size_t n_messages, const char* path) {
  return Guard([&] {
    if (!device || !path) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_conversation_save: NULL argument");
    std::vector<int32_t> ids;
    if (int rc = MessagesToIds(device, messages, n_messages, "tlr_conversation_save", &ids); rc != TLR_OK) return rc;
    std::unique_ptr<tlr::DeviceContext> c = device->contexts->Take(ids);
    if (!c->slm.has_cache()) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_conversation_save: the prompt cache holds no context of this conversation");
    }
    // Only what this conversation shares with the context: a context of another conversation
    // that begins the same way (the template's first tokens, a common system prompt) must not
    // put that conversation's later messages into this one's file.
    size_t common = 0;
    const std::vector<int32_t>& held = c->slm.tokens;
    const size_t valid = std::min(held.size(), static_cast<size_t>(c->slm.cache.size()));
    while (common < valid && common < ids.size() && held[common] == ids[common]) ++common;
    tlr::Status st = tlr::Status::Ok();
    if (common == 0) {
      device->contexts->Give(std::move(c));
      return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_conversation_save: the prompt cache holds no context of this conversation");
    }
    if (common == held.size()) {
      st = tlr::SaveSlmContext(path, *device->models.slm, c->slm);
    } else {
      tlr::SlmContext part;
      part.n_ctx = c->slm.n_ctx;
      part.tokens.assign(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(common));
      part.cache = c->slm.cache.Fork(static_cast<int64_t>(common));
      st = tlr::SaveSlmContext(path, *device->models.slm, part);
    }
    device->contexts->Give(std::move(c));
    if (!st.ok()) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_conversation_save: " + st.message());
    return Ok();
  });
}

int tlr_conversation_load(tlr_device* device, const char* path) {
  return Guard([&] {
    if (!device || !path) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_conversation_load: NULL argument");
    auto c = tlr::LoadSlmContext(path, *device->models.slm, device->contexts->options().n_ctx);
    if (!c.ok()) {
      const std::string& m = c.status().message();
      const bool foreign = m.find("another model") != std::string::npos || m.find("another KV") != std::string::npos ||
                           m.find("KV shape") != std::string::npos;
      return Fail(foreign ? TLR_ERR_INCOMPATIBLE : TLR_ERR_LOAD, "tlr_conversation_load: " + m);
    }
    if (device->contexts->options().max_slots <= 0) {
      return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_conversation_load: the device has no prompt cache to put it in "
                                            "(tlr_device_params.kv_slots is 0)");
    }
    auto ctx = std::make_unique<tlr::DeviceContext>();
    ctx->slm = std::move(c).value();
    device->contexts->Give(std::move(ctx));
    return Ok();
  });
}

int tlr_model_pack(const char* gguf_path, const char* packed_path) {
  return Guard([&] {
    if (!gguf_path || !packed_path) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_model_pack: NULL argument");
    tlr::Status s = tlr::WritePackedGguf(gguf_path, packed_path);
    if (!s.ok()) return Fail(TLR_ERR_LOAD, "tlr_model_pack: " + s.message());
    // Read back with every check of an open; a file that does not pass is not left behind.
    tlr::Model::Options check;
    check.repack = false;
    check.weight_cache = "off";
    auto m = tlr::Model::Load(packed_path, check);
    if (!m.ok()) {
      std::remove(packed_path);
      return Fail(TLR_ERR_LOAD, "tlr_model_pack: the file written does not load (removed): " + m.status().message());
    }
    return Ok();
  });
}

int tlr_device_cancel(tlr_device* device) {
  return Guard([&] {
    if (!device) return Fail(TLR_ERR_INVALID_ARGUMENT, "tlr_device_cancel: device is NULL");
    std::lock_guard<std::mutex> lock(device->mu);
    if (device->generating) device->cancel.store(true);
    return Ok();
  });
}

}  // extern "C"
