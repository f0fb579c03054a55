/* The app's own HTTP stack through tlr_http_hook (C, through libtlr.so only; run by
 * http_hook_test.py against a real `tlr serve`): a hook that carries the requests over its own
 * sockets, answering from another thread, must give the tokens and the LLM work of the built-in
 * client; hooks that fail, hang past the deadline, or answer garbage must give FALLBACK tokens
 * with a clear llm_error, never a crash; an answer given inside send past the deadline is not used.
 *
 *   http_hook_test SERVER_URL DEMO_DIR [--sync]   (prints "tokens: id/source ..." of the routed run;
 *   --sync: the hook answers inside send, starting no thread)
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tlr.h"

static const char* kPrompt = "Question: Where does a fexko live?\nA. marsh\nB. desert\nC. forest\nD. river\nE. cave\n";
static int failures = 0;
#define CHECK(cond, ...)                                      \
  do {                                                        \
    if (!(cond)) {                                            \
      fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                           \
      fprintf(stderr, "\n");                                  \
      ++failures;                                             \
    }                                                         \
  } while (0)

/* ---- a minimal blocking HTTP/1.1 client: the "app's own stack" --------------------------- */
typedef struct {
  char* method;
  char* url;
  char* headers; /* "Name: value\r\n" lines */
  char* body;
  size_t body_len;
  tlr_http_exchange* exchange;
} job;

static char* dup_n(const char* s, size_t n) {
  char* d = malloc(n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

/* One request on a fresh connection; answers the exchange. */
static void* carry(void* arg) {
  job* j = arg;
  char host[256] = {0}, port[16] = "80";
  const char* hp = strstr(j->url, "://") + 3;
  const char* path = strchr(hp, '/');
  size_t hlen = path ? (size_t)(path - hp) : strlen(hp);
  const char* colon = memchr(hp, ':', hlen);
  memcpy(host, hp, colon ? (size_t)(colon - hp) : hlen);
  if (colon) snprintf(port, sizeof port, "%.*s", (int)(hp + hlen - colon - 1), colon + 1);
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_STREAM;
  int fd = -1;
  if (getaddrinfo(host, port, &hints, &res) == 0) {
    fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
    freeaddrinfo(res);
  }
  if (fd < 0) {
    tlr_http_fail(j->exchange, "connect failed");
  } else {
    size_t cap = strlen(j->headers) + j->body_len + 512;
    char* req = malloc(cap);
    int n = snprintf(req, cap, "%s %s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n",
                     j->method, path ? path : "/", host, port, j->headers, j->body_len);
    memcpy(req + n, j->body, j->body_len);
    send(fd, req, (size_t)n + j->body_len, MSG_NOSIGNAL);
    free(req);
    size_t len = 0, rcap = 65536;
    char* in = malloc(rcap);
    ssize_t r;
    while ((r = recv(fd, in + len, rcap - len - 1, 0)) > 0) {
      len += (size_t)r;
      if (len + 1 == rcap) in = realloc(in, rcap *= 2);
    }
    in[len] = 0;
    close(fd);
    char* end = strstr(in, "\r\n\r\n");
    int status = 0;
    if (!end || sscanf(in, "HTTP/1.%*d %d", &status) != 1) {
      tlr_http_fail(j->exchange, "no HTTP reply");
    } else {
      /* headers as name/value pairs (only Retry-After matters to TLR) */
      const char* hv[8] = {NULL};
      char* ra = strstr(in, "Retry-After: ");
      if (ra && ra < end) {
        hv[0] = "retry-after";
        hv[1] = dup_n(ra + 13, strcspn(ra + 13, "\r\n"));
      }
      tlr_http_complete(j->exchange, status, hv, end + 4, len - (size_t)(end + 4 - in));
      free((void*)hv[1]);
    }
    free(in);
  }
  free(j->method);
  free(j->url);
  free(j->headers);
  free(j->body);
  free(j);
  return NULL;
}

typedef struct {
  int kind; /* 0 forward, 1 fail, 2 hang until cancelled, 3 garbage body, 4 bad status,
               5 fail twice, and once more after the run (later answers are ignored),
               6 answer inside send past the deadline (not used: a timeout, as a late answer) */
  int sync; /* answer inside send (where threads cannot be started: qemu-user here) */
  int sent, cancels;
  pthread_mutex_t mu;
  tlr_http_exchange* hung[64];
  int n_hung;
} hook_state;

static void hook_send(void* user, tlr_http_exchange* x, const tlr_http_request* r) {
  hook_state* s = user;
  pthread_mutex_lock(&s->mu);
  ++s->sent;
  pthread_mutex_unlock(&s->mu);
  if (s->kind == 1) {
    tlr_http_fail(x, "airplane mode");
  } else if (s->kind == 2) {
    pthread_mutex_lock(&s->mu);
    if (s->n_hung < 64) s->hung[s->n_hung++] = x;
    pthread_mutex_unlock(&s->mu);
  } else if (s->kind == 3) {
    tlr_http_complete(x, 200, NULL, "<html>captive portal</html>", 27);
  } else if (s->kind == 4) {
    tlr_http_complete(x, 999, NULL, NULL, 0);
  } else if (s->kind == 6) {
    const struct timespec late = {0, 450 * 1000 * 1000}; /* the run's timeout is 0.3 s */
    nanosleep(&late, NULL);
    tlr_http_complete(x, 200, NULL, "{}", 2);
  } else if (s->kind == 5) {
    tlr_http_fail(x, "first answer");
    tlr_http_complete(x, 200, NULL, "{}", 2);
    pthread_mutex_lock(&s->mu);
    if (s->n_hung < 64) s->hung[s->n_hung++] = x; /* answered again once TLR has let go of it */
    pthread_mutex_unlock(&s->mu);
  } else {
    job* j = calloc(1, sizeof *j);
    j->method = strdup(r->method);
    j->url = strdup(r->url);
    size_t hl = 1;
    for (const char* const* h = r->headers; h[0]; h += 2) hl += strlen(h[0]) + strlen(h[1]) + 4;
    j->headers = calloc(1, hl);
    for (const char* const* h = r->headers; h[0]; h += 2) {
      strcat(j->headers, h[0]);
      strcat(j->headers, ": ");
      strcat(j->headers, h[1]);
      strcat(j->headers, "\r\n");
    }
    j->body = dup_n(r->body ? r->body : "", r->body_len);
    j->body_len = r->body_len;
    j->exchange = x;
    if (s->sync) {
      carry(j);
    } else {
      pthread_t t; /* answered from another thread, later */
      pthread_create(&t, NULL, carry, j);
      pthread_detach(t);
    }
  }
}

static void hook_cancel(void* user, tlr_http_exchange* x) {
  hook_state* s = user;
  pthread_mutex_lock(&s->mu);
  ++s->cancels;
  for (int i = 0; i < s->n_hung; ++i) {
    if (s->hung[i] == x) { /* answer the abandoned exchange once, as the API asks */
      s->hung[i] = s->hung[--s->n_hung];
      tlr_http_fail(x, "aborted");
      break;
    }
  }
  pthread_mutex_unlock(&s->mu);
}

/* ---- runs ---------------------------------------------------------------------------------- */
typedef struct {
  char line[8192];
  size_t len;
  char first_error[512];
} trace;

static int on_token(const tlr_token* t, void* user) {
  trace* tr = user;
  const char* src = t->source == TLR_SOURCE_LLM ? "llm" : t->source == TLR_SOURCE_FALLBACK ? "fallback" : "slm";
  if (tr->len + 32 < sizeof tr->line) tr->len += (size_t)snprintf(tr->line + tr->len, 32, " %d/%s", t->id, src);
  if (t->source == TLR_SOURCE_FALLBACK && !tr->first_error[0] && t->llm_error) {
    snprintf(tr->first_error, sizeof tr->first_error, "%s", t->llm_error);
  }
  return 0;
}

static int run(tlr_device* dev, const char* url, const tlr_http_hook* hook, double timeout_s, trace* tr, tlr_stats* st) {
  tlr_llm_params lp;
  tlr_llm_params_init(&lp);
  lp.server_url = url;
  lp.http_hook = hook;
  lp.timeout_s = timeout_s;
  lp.retries = 0;
  lp.retry_after_s = 0;
  tlr_llm* llm = NULL;
  if (tlr_llm_open(&lp, &llm) != TLR_OK) {
    fprintf(stderr, "tlr_llm_open: %s\n", tlr_last_error());
    return 1;
  }
  tlr_generate_params gp;
  tlr_generate_params_init(&gp);
  gp.max_tokens = 24;
  gp.threshold = 0.95f;
  gp.pipeline = 0; /* blocking: the LLM work is then the same whichever stack carries it */
  memset(tr, 0, sizeof *tr);
  memset(st, 0, sizeof *st);
  st->struct_size = sizeof *st;
  const int rc = tlr_generate(dev, llm, kPrompt, &gp, on_token, tr, st);
  if (rc != TLR_OK) fprintf(stderr, "tlr_generate: %s\n", tlr_last_error());
  tlr_llm_free(llm);
  return rc;
}

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "--sync") != 0)) {
    fprintf(stderr, "usage: http_hook_test SERVER_URL DEMO_DIR [--sync]\n");
    return 2;
  }
  char slm[1024], router[1024];
  snprintf(slm, sizeof slm, "%s/slm.gguf", argv[2]);
  snprintf(router, sizeof router, "%s/router.gguf", argv[2]);
  tlr_device_params dp;
  tlr_device_params_init(&dp);
  dp.slm_path = slm;
  dp.router = router;
  tlr_device* dev = NULL;
  if (tlr_device_open(&dp, &dev) != TLR_OK) {
    fprintf(stderr, "tlr_device_open: %s\n", tlr_last_error());
    return 1;
  }
  hook_state s;
  memset(&s, 0, sizeof s);
  s.sync = argc == 4;
  pthread_mutex_init(&s.mu, NULL);
  tlr_http_hook hook = {sizeof(tlr_http_hook), hook_send, hook_cancel, &s};

  trace builtin, hooked;
  tlr_stats a, b;
  CHECK(run(dev, argv[1], NULL, 10, &builtin, &a) == 0, "built-in run");
  CHECK(run(dev, argv[1], &hook, 10, &hooked, &b) == 0, "hooked run");
  printf("tokens:%s\n", builtin.line);
  CHECK(strcmp(builtin.line, hooked.line) == 0, "tokens differ:\n built-in:%s\n hook:    %s", builtin.line, hooked.line);
  CHECK(a.routed > 0 && a.fallbacks == 0 && b.fallbacks == 0, "routed %lld, fallbacks %lld / %lld (%s)",
        (long long)a.routed, (long long)a.fallbacks, (long long)b.fallbacks, hooked.first_error);
  CHECK(a.llm_prefilled == b.llm_prefilled && a.llm_generated == b.llm_generated && a.llm_calls == b.llm_calls,
        "LLM work differs: prefilled %lld / %lld, generated %lld / %lld, calls %lld / %lld", (long long)a.llm_prefilled,
        (long long)b.llm_prefilled, (long long)a.llm_generated, (long long)b.llm_generated, (long long)a.llm_calls,
        (long long)b.llm_calls);
  CHECK(s.sent >= b.llm_calls && b.llm_calls > 0, "hook sent %d requests for %lld calls", s.sent, (long long)b.llm_calls);
  printf("built-in and hook: %lld routed, LLM prefilled %lld, generated %lld, %d requests through the hook\n",
         (long long)a.routed, (long long)a.llm_prefilled, (long long)a.llm_generated, s.sent);
  { /* The hooked LLM is freed (run() frees it): the device's prompt cache still holds its backend,
       which the next generation replaces (its session's DELETE); the hook must not hear of it. */
    pthread_mutex_lock(&s.mu);
    const int sent_before = s.sent;
    pthread_mutex_unlock(&s.mu);
    trace again;
    tlr_stats c;
    CHECK(run(dev, argv[1], NULL, 10, &again, &c) == 0, "built-in run after the hooked one");
    pthread_mutex_lock(&s.mu);
    const int after = s.sent;
    pthread_mutex_unlock(&s.mu);
    CHECK(after == sent_before, "the hook was called %d times after its LLM was freed", after - sent_before);
  }

  const char* expect[] = {NULL,          "airplane mode", "no complete reply within the 0.3 s timeout",
                          "captive portal", "status 999",   "first answer",
                          "no complete reply within the 0.3 s timeout"};
  for (int kind = 1; kind <= 6; ++kind) {
    s.kind = kind;
    trace tr;
    tlr_stats st;
    CHECK(run(dev, argv[1], &hook, 0.3, &tr, &st) == 0, "run with hook kind %d", kind);
    CHECK(st.routed == 0 && st.fallbacks > 0, "hook kind %d: routed %lld, fallbacks %lld", kind, (long long)st.routed,
          (long long)st.fallbacks);
    CHECK(tr.first_error[0] && strstr(tr.first_error, expect[kind]), "hook kind %d: llm_error '%s' lacks '%s'", kind,
          tr.first_error, expect[kind]);
    printf("hook kind %d: %lld fallbacks, llm_error: %s\n", kind, (long long)st.fallbacks, tr.first_error);
    if (kind == 5) { /* the app answers exchanges TLR is done with: ignored (ASan checks no freed memory is touched) */
      for (int i = 0; i < s.n_hung; ++i) tlr_http_fail(s.hung[i], "late answer");
      s.n_hung = 0;
    }
  }
  CHECK(s.cancels > 0 && s.n_hung == 0, "cancels %d, still hung %d", s.cancels, s.n_hung);
  tlr_device_free(dev);
  if (failures) fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
