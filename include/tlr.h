/* tlr.h: the C API of TLR's device side (token-level routing between a small on-device model
 * and a large model in this process or behind a server). A stable C ABI over libtlr.so: no C++
 * types cross it, every object is an opaque handle with an explicit free function, and every
 * parameter struct starts with its own size so that later versions can append fields.
 *
 * Typical use (see examples/generate.c):
 *
 *   tlr_device_params dp;  tlr_device_params_init(&dp);
 *   dp.slm_path = "slm.gguf";  dp.router = "router.gguf";
 *   tlr_device* dev;  if (tlr_device_open(&dp, &dev) != TLR_OK) puts(tlr_last_error());
 *   tlr_llm_params lp;  tlr_llm_params_init(&lp);  lp.server_url = "http://gpu-box:8080";
 *   tlr_llm* llm;  tlr_llm_open(&lp, &llm);
 *   tlr_generate_params gp;  tlr_generate_params_init(&gp);  gp.max_tokens = 64;
 *   tlr_stats st;  st.struct_size = sizeof st;
 *   tlr_generate(dev, llm, "Question: ...", &gp, on_token, user_data, &st);
 *   tlr_llm_free(llm);  tlr_device_free(dev);
 *
 * Errors: every function that can fail returns a tlr_status (TLR_OK = 0). The readable message
 * of the last failure on the calling thread is tlr_last_error() (thread-local; a successful
 * call clears it).
 *
 * Thread-safety:
 *   - tlr_device: one generation at a time. A tlr_generate on a device that is already
 *     generating (on another thread) fails at once with TLR_ERR_BUSY. tlr_device_cancel,
 *     tlr_tokenize, tlr_detokenize and tlr_device_get_info may be called from any thread at any
 *     time, also during a generation. Different devices are independent: generate on several
 *     at once from different threads.
 *   - tlr_llm: immutable after tlr_llm_open; one tlr_llm may serve generations on several
 *     devices at once (each generation has its own KV cache or server session).
 *   - Free a handle only when no call on it is running. Callbacks run on the thread that called
 *     tlr_generate, and must not call tlr_generate on the same device.
 */
#ifndef TLR_H_
#define TLR_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TLR_API __attribute__((visibility("default")))
#else
#define TLR_API
#endif

/* The API this header describes. The library's SONAME carries the major version
 * (libtlr.so.1); minor versions only add functions or append fields to structs. */
#define TLR_API_VERSION_MAJOR 1
#define TLR_API_VERSION_MINOR 1
#define TLR_API_VERSION (TLR_API_VERSION_MAJOR * 100 + TLR_API_VERSION_MINOR)

/* TLR_API_VERSION of the library actually loaded (compare with the header's). */
TLR_API int tlr_api_version(void);
/* The TLR release the library was built from, e.g. "0.1.0". Static string. */
TLR_API const char* tlr_version(void);

typedef enum tlr_status {
  TLR_OK = 0,
  TLR_ERR_INVALID_ARGUMENT = 1, /* a null handle/pointer, a value out of range, an unknown name */
  TLR_ERR_LOAD = 2,             /* a model or router file is missing, unreadable or malformed */
  TLR_ERR_INCOMPATIBLE = 3,     /* the router does not fit the SLM; the LLM's vocabulary differs */
  TLR_ERR_LLM = 4,              /* the LLM could not be set up (refused API key, a server with
                                   another vocabulary) */
  TLR_ERR_BUSY = 5,             /* the device is generating on another thread */
  TLR_ERR_BUFFER_TOO_SMALL = 6, /* the output did not fit; the needed size was reported */
  TLR_ERR_GENERATE = 7,         /* generation failed part way (tokens before it were delivered) */
  TLR_ERR_INTERNAL = 8          /* a bug or out of memory */
} tlr_status;

/* "TLR_OK", "TLR_ERR_LOAD", ...; static strings. */
TLR_API const char* tlr_status_name(int status);
/* Why the last failing call on this thread failed; "" after a successful call. The pointer is
 * valid until the next TLR call on this thread. */
TLR_API const char* tlr_last_error(void);

/* ---- the device: SLM + router ---------------------------------------------------------- */

typedef struct tlr_device tlr_device;

typedef struct tlr_device_params {
  size_t struct_size;   /* sizeof(tlr_device_params); set by tlr_device_params_init */
  const char* slm_path; /* small model GGUF (required) */
  const char* router;   /* router GGUF from `tlr router train`, or a built-in kind:
                           "maxprob", "entropy", "random" (required) */
  int n_threads;        /* SLM worker threads (default 1) */
  const char* kv_type;  /* KV cache storage: "f16" (default), "f32", "q8_0" */
  uint64_t seed;        /* the "random" router's seed (default 42) */
  /* The prompt cache: the SLM's KV cache is kept after a generation and the next prompt reuses
     its longest common prefix (a conversation prefills only its new turn). Up to kv_slots
     contexts at once (default 4; 0: off), together at most kv_budget_mb MiB of KV memory
     (default 1024), each for up to n_ctx positions (default 4096: the longest conversation) */
  int kv_slots;
  int64_t kv_budget_mb;
  int64_t n_ctx;
  /* The weight cache (docs/guide.md#the-weight-cache): the SLM's matrices in the kernels' layout,
     written at the first open and mapped at later ones (fast start, clean file-backed memory).
     "auto" (default; NULL too): beside the model, else in $XDG_CACHE_HOME/tlr or ~/.cache/tlr;
     a directory (e.g. an app's cache directory when the model sits in read-only storage); "off":
     prepare the weights in memory at every open */
  const char* weight_cache;
} tlr_device_params;

TLR_API void tlr_device_params_init(tlr_device_params* params);

/* Writes the model at gguf_path as one packed file at packed_path (since 1.1; `tlr convert`
 * does the same): its weights already in the kernels' layout, so that it opens as fast as a
 * model whose weight cache exists, with one copy on disk (an app that downloads a GGUF packs it
 * and deletes the download). Open the packed file as any model (slm_path, model_path); its
 * tensors are checksummed and checked at every open, and no weight cache is written for it. The
 * layout is the same on every CPU: a file packed on a desktop works on a phone. Written
 * atomically (a failure leaves no file); takes about as long as reading the model twice.
 * TLR_ERR_LOAD when the model cannot be loaded or the file cannot be written. */
TLR_API int tlr_model_pack(const char* gguf_path, const char* packed_path);

/* Loads the SLM and the router and checks that they fit each other. On success *out owns the
 * device; free it with tlr_device_free. The strings are copied. */
TLR_API int tlr_device_open(const tlr_device_params* params, tlr_device** out);
TLR_API void tlr_device_free(tlr_device* device); /* NULL is fine */

typedef struct tlr_device_info {
  size_t struct_size;           /* set by the caller: sizeof(tlr_device_info) */
  int32_t n_vocab, bos, eos;    /* the SLM's vocabulary; bos/eos -1 when absent */
  int64_t n_embd;               /* the SLM's hidden size */
  float router_threshold;       /* the router's recommended threshold */
  char router_kind[16];         /* "citer", "colm", "maxprob", "entropy", "random" */
} tlr_device_info;
TLR_API int tlr_device_get_info(const tlr_device* device, tlr_device_info* info);

/* Token ids of `text` (text_len bytes; UTF-8) under the SLM's tokenizer. add_special: BOS/EOS
 * as the vocabulary says; parse_special: control tokens written in the text become their ids.
 * Writes at most `capacity` ids; *n_ids is the full count. When it exceeds capacity the call
 * returns TLR_ERR_BUFFER_TOO_SMALL (ask again with a bigger buffer; ids may be NULL with
 * capacity 0 to ask for the count). */
TLR_API int tlr_tokenize(const tlr_device* device, const char* text, size_t text_len, int add_special,
                         int parse_special, int32_t* ids, size_t capacity, size_t* n_ids);
/* The text of `ids` (n_ids of them), NUL-terminated into buf. *text_len is its length without
 * the NUL; when text_len + 1 > capacity, returns TLR_ERR_BUFFER_TOO_SMALL. */
TLR_API int tlr_detokenize(const tlr_device* device, const int32_t* ids, size_t n_ids, int render_special,
                           char* buf, size_t capacity, size_t* text_len);

/* ---- the app's own HTTP stack (API 1.1) ---------------------------------------------------
 * An app that already has a network stack (OkHttp, URLSession, a proxy, certificate pinning,
 * its own auth) carries the device's calls to the LLM's server itself: every request of the
 * remote backends (the native protocol, the OpenAI one, the vocabulary fetch) goes to the hook's
 * `send` instead of TLR's built-in client. TLS, proxies and certificates are then the app's
 * (ca_file and verify_tls do not apply; an https server_url works in a build without TLS).
 *
 * `send` starts the request and may return at once: the app answers later, from any thread,
 * with exactly one tlr_http_complete or tlr_http_fail on the exchange (or answers inside `send`;
 * TLR cannot watch the deadline or a cancel while `send` blocks, and an answer that comes past
 * the deadline, or for a generation cancelled meanwhile, is not used: answer from another thread
 * to keep cancel prompt). Everything the request points to is valid only during `send`: copy
 * what you keep. When TLR
 * stops waiting (the call's deadline passed, the generation was cancelled) it calls `cancel`
 * (optional) on the same exchange; the app should abort the request, and may still answer the
 * exchange (the answer is then dropped). `cancel` may come after the app has answered (the two
 * crossed); only the first answer counts, later ones are ignored, so answering from the cancel
 * path is always safe (an exchange is a handle, not memory the app could outlive: answering it
 * twice, late, or after TLR gave up touches nothing). A reply that never comes, an error status or a
 * malformed answer makes that LLM call fail: its token is the SLM's own (source FALLBACK), with
 * tlr_token.llm_error saying why. */
typedef struct tlr_http_exchange tlr_http_exchange;

typedef struct tlr_http_request {
  const char* method;          /* "GET", "POST" or "DELETE" */
  const char* url;             /* absolute: server_url's scheme://host:port[/prefix] + path */
  const char* const* headers;  /* name, value, name, value, ..., NULL (Content-Type,
                                  Authorization, X-TLR-Timeout-Ms, ...); the app adds Host and
                                  Content-Length as its stack does */
  const char* body;            /* body_len bytes (JSON for POST) */
  size_t body_len;
  double timeout_s;            /* how long TLR waits for the answer */
} tlr_http_request;

typedef struct tlr_http_hook {
  size_t struct_size;  /* sizeof(tlr_http_hook) */
  void (*send)(void* user_data, tlr_http_exchange* exchange, const tlr_http_request* request);
  void (*cancel)(void* user_data, tlr_http_exchange* exchange); /* may be NULL */
  void* user_data;
} tlr_http_hook;

/* The server's answer: its status (100..599), headers (name, value, ..., NULL; may be NULL) and
 * body (body_len bytes; may be NULL when 0). Copied before returning. */
TLR_API void tlr_http_complete(tlr_http_exchange* exchange, int status, const char* const* headers,
                               const char* body, size_t body_len);
/* No answer: a network error, in words (copied; may be NULL). */
TLR_API void tlr_http_fail(tlr_http_exchange* exchange, const char* message);

/* ---- the LLM: a model in this process or a server --------------------------------------- */

typedef struct tlr_llm tlr_llm;

typedef struct tlr_llm_params {
  size_t struct_size;       /* set by tlr_llm_params_init */
  const char* model_path;   /* in process: the large model GGUF (a split one: its first shard); or */
  const char* server_url;   /* behind a server: http[s]://host:port (exactly one of the two) */
  const char* backend;      /* server protocol: "tlr" (`tlr serve`, default) or "openai" */
  const char* api_key;      /* Bearer token for the server (NULL: none) */
  const char* server_model; /* openai backend: model name (NULL: the server's first) */
  const char* ca_file;      /* https: CA bundle to verify the server with (NULL: the system's) */
  int verify_tls;           /* https: verify the certificate (default 1) */
  double timeout_s;         /* deadline of one LLM call incl. retries (default 2); past it the
                               SLM's own token is used (source FALLBACK). A server that cannot
                               answer in time refuses at once (429); the SLM then answers until
                               the server's Retry-After */
  int retries;              /* further attempts after a failed request (default 2) */
  double retry_after_s;     /* after the server failed: SLM-only this long (default 1) */
  int connections;          /* calls in flight at once (default 4) */
  double sim_rtt_ms;        /* simulated network round trip per call (default 0) */
  double sim_jitter_ms;     /* uniform +- jitter on it (default 0) */
  int n_threads;            /* in process: the LLM's worker threads (default 1) */
  const char* kv_type;      /* in process: KV cache storage, as for the device */
  const char* weight_cache; /* in process: the weight cache, as for the device */
  const char* llm_tokenizer; /* server: the LLM's tokenizer when its vocabulary differs from the
                                SLM's (a GGUF, a tokenizer.json, or "server" to fetch it from
                                `tlr serve`); NULL: the server's vocabulary must be the SLM's. In
                                process a model of another vocabulary is bridged by itself */
  const tlr_http_hook* http_hook; /* server (API 1.1): the app's own HTTP stack carries every
                                     request (copied at tlr_llm_open; user_data must outlive the
                                     tlr_llm); NULL: TLR's built-in client */
} tlr_llm_params;

TLR_API void tlr_llm_params_init(tlr_llm_params* params);
/* In process: loads the model. Server: checks the parameters; connecting happens at each
 * generation (an unreachable server is not an error: its tokens become FALLBACK tokens; in
 * TLR_MODE_LARGE_ONLY, which has no SLM token to fall back on, a failed LLM call ends the
 * generation with TLR_ERR_GENERATE). */
TLR_API int tlr_llm_open(const tlr_llm_params* params, tlr_llm** out);
/* NULL is fine. Not while a generation uses it. With an http_hook: the hook is never called after
 * this returns (a call into it under way is waited for; a device's prompt cache may keep this
 * LLM's backend, which then no longer uses the hook), so the hook's user_data may go then. Not from
 * inside the hook. */
TLR_API void tlr_llm_free(tlr_llm* llm);

/* ---- generation ------------------------------------------------------------------------ */

typedef enum tlr_mode {
  TLR_MODE_JOINT = 0,      /* route uncertain tokens to the LLM */
  TLR_MODE_SMALL_ONLY = 1, /* the SLM alone (the router still scores, for the confidences) */
  TLR_MODE_LARGE_ONLY = 2  /* the LLM alone (a failed LLM call: TLR_ERR_GENERATE, no FALLBACK) */
} tlr_mode;

typedef enum tlr_policy {
  TLR_POLICY_THRESHOLD = 0, /* route when the confidence is below the threshold */
  TLR_POLICY_COST = 1       /* the bar falls as a call's price rises: a cold first call (the whole
                               prompt to read) needs far less confidence than a warm one; the
                               threshold is the bar of the cheapest call (useful: 0.95-0.999) */
} tlr_policy;

typedef enum tlr_source {
  TLR_SOURCE_SLM = 0,
  TLR_SOURCE_LLM = 1,
  TLR_SOURCE_FALLBACK = 2 /* routed, but the LLM call failed: the SLM's own token */
} tlr_source;

typedef enum tlr_stop {
  TLR_STOP_EOS = 0,        /* the end-of-generation token */
  TLR_STOP_MAX_TOKENS = 1,
  TLR_STOP_CALLBACK = 2,   /* the token callback returned non-zero */
  TLR_STOP_CANCELLED = 3   /* tlr_device_cancel */
} tlr_stop;

typedef struct tlr_generate_params {
  size_t struct_size;   /* set by tlr_generate_params_init */
  int mode;             /* tlr_mode (default joint) */
  float threshold;      /* route when the router's confidence is below this, in [0, 1];
                           negative (default): the router's recommended threshold */
  int span;             /* tokens per LLM call, 1..64 (default 1) */
  int max_tokens;       /* default 128 */
  int chat;             /* wrap the prompt in the SLM's chat template (default 0) */
  float temperature;    /* 0 = greedy (default) */
  int top_k;            /* default 40 (0 = off) */
  float top_p;          /* default 1 (off) */
  float min_p;          /* default 0 (off) */
  float repeat_penalty; /* default 1 (off) */
  int repeat_last_n;    /* default 64 */
  uint64_t seed;        /* sampling seed (default 42) */
  int pipeline;         /* 1 (default): keep decoding while routed tokens are on the network;
                           0: block on each. The tokens are identical either way */
  int spec_depth;       /* pipeline: tokens the SLM may run ahead (default 32) */
  int spec_branches;    /* pipeline: SLM candidates speculated on at once (default 4) */
  int lookahead;        /* pipeline: most LLM continuation tokens asked for per call; the ask
                           adapts to how much of earlier ones stood (default 8) */
  double sim_slm_ms;    /* simulated device pace: each SLM pass takes at least this (default 0) */
  double llm_budget;    /* pipeline: LLM tokens it may cost per routed token (answers, lookahead,
                           speculative calls, cancelled ones included); >= 1, or 0 for no limit
                           (as fast as possible). Default 1.25 */
  int policy;           /* tlr_policy (default threshold) */
  double price_ratio;   /* the price model: an LLM output token costs this many input tokens
                           (default 4); prices the cost policy's calls and cost_budget */
  double cost_budget;   /* most the LLM's calls may cost per generation, in input tokens under
                           the price model; 0 (default): no limit */
} tlr_generate_params;

TLR_API void tlr_generate_params_init(tlr_generate_params* params);

/* One generated token, as it is confirmed. Valid only during the callback. */
typedef struct tlr_token {
  size_t struct_size;    /* sizeof(tlr_token) of the library: read fields only below it */
  int32_t id;
  const char* text;      /* complete UTF-8, NUL-terminated; may be "" while a character is
                            split across tokens, and is "" for the end token */
  size_t text_len;
  int source;            /* tlr_source */
  float confidence;      /* the router's; -1 when it did not run */
  int end;               /* 1 for the end-of-generation token */
  double slm_ms, router_ms, llm_ms; /* time spent on this token (llm_ms: its call's round trip) */
  double stall_ms;       /* waiting for the LLM with nothing else to do, since the last token */
  double at_ms;          /* since the start of the generation */
  const char* llm_error; /* FALLBACK tokens: why the LLM call failed; "" otherwise */
} tlr_token;

/* Return 0 to go on, non-zero to stop (the generation then ends with TLR_STOP_CALLBACK). */
typedef int (*tlr_token_callback)(const tlr_token* token, void* user_data);

typedef struct tlr_stats {
  size_t struct_size;    /* set by the caller: sizeof(tlr_stats) */
  int64_t prompt_tokens;
  int64_t generated;     /* tokens emitted, including an end token */
  int64_t routed;        /* produced by the LLM */
  int64_t fallbacks;     /* routed, but the SLM's own because the LLM call failed */
  int64_t llm_calls;
  int stop;              /* tlr_stop */
  float threshold;       /* the threshold used */
  double ttft_ms, tbt_ms, total_ms;
  double slm_ms, router_ms, llm_ms, stall_ms;
  /* pipeline */
  int64_t spec_resolved, spec_hits, spec_branch_hits, lookahead_used, wasted_slm_steps, cancelled_calls;
  /* behind a server (zero in process) */
  int64_t http_requests, retries, resyncs, failed_calls;
  char llm_failure[256]; /* "3 timeouts: <first message>" when calls failed; "" otherwise */
  /* The LLM's work for this generation (what routing exists to save): tokens it prefilled and
     generated (routed ones, lookahead, and calls cancelled or missed), and its forward-pass time
     where the server reports it (-1 otherwise) */
  int64_t llm_prefilled, llm_generated;
  double llm_forward_ms;
  int64_t prompt_reused;  /* prompt tokens the SLM's cache already held (the prompt cache): of
                             prompt_tokens, only prompt_tokens - prompt_reused were prefilled */
} tlr_stats;

/* Generates after `prompt` (UTF-8 text; BOS is added, or the chat template with params->chat).
 * `llm` may be NULL only for TLR_MODE_SMALL_ONLY; `params` NULL means the defaults;
 * `on_token` may be NULL; `stats` may be NULL (else its struct_size must be set). Blocks until
 * the end; returns TLR_OK also when the callback or tlr_device_cancel stopped it (see
 * stats->stop). An LLM that fails mid-way is not an error: its tokens come from the SLM with
 * source TLR_SOURCE_FALLBACK. */
TLR_API int tlr_generate(tlr_device* device, const tlr_llm* llm, const char* prompt,
                         const tlr_generate_params* params, tlr_token_callback on_token, void* user_data,
                         tlr_stats* stats);
/* The same after prompt token ids (taken as they are: no BOS added; params->chat ignored). */
TLR_API int tlr_generate_ids(tlr_device* device, const tlr_llm* llm, const int32_t* prompt, size_t n_prompt,
                             const tlr_generate_params* params, tlr_token_callback on_token, void* user_data,
                             tlr_stats* stats);
/* One message of a conversation. role: "system", "user" or "assistant" ("developer" reads as
 * "system"); content: UTF-8 text. */
typedef struct tlr_message {
  const char* role;
  const char* content;
} tlr_message;
/* Generates the next assistant message of a conversation: the SLM's chat template renders the
 * whole history (as Hugging Face's apply_chat_template, ending with the assistant header; a
 * Qwen3 template's thinking switch follows the template's default). Append the reply as an
 * "assistant" message and the user's next message, and call again: the prompt cache
 * (tlr_device_params.kv_slots) keeps the SLM's cache and the LLM's session of each
 * conversation, so a turn prefills only what is new (stats->prompt_reused says how much was
 * reused). A template that rewrites history (Qwen3 drops earlier <think> blocks) reuses a
 * shorter prefix. Otherwise as tlr_generate (params->chat ignored). */
TLR_API int tlr_generate_chat(tlr_device* device, const tlr_llm* llm, const tlr_message* messages, size_t n_messages,
                              const tlr_generate_params* params, tlr_token_callback on_token, void* user_data,
                              tlr_stats* stats);
/* Saves the device's cached context of a conversation to `path` (atomically): the prompt
 * cache's context sharing the longest prefix with `messages` rendered (after tlr_generate_chat,
 * pass the conversation with its reply), as far as it agrees with the conversation: never the
 * later tokens of another conversation that begins the same way (a shared system prompt). The file
 * holds the token ids, the SLM's KV cache and the SLM's fingerprint. TLR_ERR_INVALID_ARGUMENT
 * when no cached context shares a first token with the conversation; one that shares only the
 * chat template's opening (`<|im_start|>user` ...) saves just that, a file of little use. */
TLR_API int tlr_conversation_save(tlr_device* device, const tlr_message* messages, size_t n_messages,
                                  const char* path);
/* Puts a saved context into the device's prompt cache, e.g. in a new process: the next
 * tlr_generate_chat of that conversation prefills only its new messages. A file saved with
 * another model or KV type, or a corrupt one, is TLR_ERR_INCOMPATIBLE / TLR_ERR_LOAD with a clear
 * message; a device without a prompt cache (kv_slots 0) is TLR_ERR_INVALID_ARGUMENT. */
TLR_API int tlr_conversation_load(tlr_device* device, const char* path);
/* Stops the generation running on `device` (from any thread): tlr_generate returns within
 * ~50 ms with TLR_STOP_CANCELLED (while the prompt is read, after the piece being read: about
 * 0.1 s, 64 tokens at least). No effect when the device is not generating. */
TLR_API int tlr_device_cancel(tlr_device* device);

#ifdef __cplusplus
}
#endif

#endif /* TLR_H_ */
