/* Example: token-level routing from a C program through libtlr (include/tlr.h).
 *
 *   cc generate.c $(pkg-config --cflags --libs tlr) -o generate
 *   ./generate SLM.gguf ROUTER.gguf LLM.gguf|http://host:port "Question: ..." [MAX_TOKENS]
 *
 * Prints one line per token: its id, where it came from (SLM, LLM or FALLBACK) and its text
 * (newlines and tabs escaped), then a summary on stderr. Exit status 0 on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tlr.h>

static const char* SourceName(int source) {
  return source == TLR_SOURCE_LLM ? "LLM" : source == TLR_SOURCE_FALLBACK ? "FALLBACK" : "SLM";
}

/* Called for every token as it is confirmed; return non-zero to stop. */
static int OnToken(const tlr_token* t, void* user_data) {
  int* count = (int*)user_data;
  ++*count;
  printf("%d\t%s\t", (int)t->id, SourceName(t->source));
  for (size_t i = 0; i < t->text_len; ++i) {
    char c = t->text[i];
    if (c == '\n') fputs("\\n", stdout);
    else if (c == '\t') fputs("\\t", stdout);
    else if (c == '\\') fputs("\\\\", stdout);
    else putchar(c);
  }
  putchar('\n');
  return 0;
}

static int Fail(const char* what, int status) {
  fprintf(stderr, "%s: %s: %s\n", what, tlr_status_name(status), tlr_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s SLM ROUTER LLM|URL PROMPT [MAX_TOKENS]\n", argv[0]);
    return 2;
  }
  if (tlr_api_version() / 100 != TLR_API_VERSION_MAJOR) {
    fprintf(stderr, "libtlr has API %d, this program was built for %d\n", tlr_api_version(), TLR_API_VERSION);
    return 1;
  }

  tlr_device_params dp;
  tlr_device_params_init(&dp);
  dp.slm_path = argv[1];
  dp.router = argv[2];
  tlr_device* device = NULL;
  int status = tlr_device_open(&dp, &device);
  if (status != TLR_OK) return Fail("device", status);

  tlr_llm_params lp;
  tlr_llm_params_init(&lp);
  if (strncmp(argv[3], "http://", 7) == 0 || strncmp(argv[3], "https://", 8) == 0) {
    lp.server_url = argv[3];
  } else {
    lp.model_path = argv[3];
  }
  tlr_llm* llm = NULL;
  status = tlr_llm_open(&lp, &llm);
  if (status != TLR_OK) {
    tlr_device_free(device);
    return Fail("llm", status);
  }

  tlr_generate_params gp;
  tlr_generate_params_init(&gp);
  gp.max_tokens = argc > 5 ? atoi(argv[5]) : 64;
  tlr_stats stats;
  stats.struct_size = sizeof stats;
  int tokens = 0;
  status = tlr_generate(device, llm, argv[4], &gp, OnToken, &tokens, &stats);
  if (status == TLR_OK) {
    fprintf(stderr, "%d tokens, %lld from the LLM, %lld fallbacks, threshold %.3f, %.1f ms\n", tokens,
            (long long)stats.routed, (long long)stats.fallbacks, stats.threshold, stats.total_ms);
    if (stats.llm_failure[0]) fprintf(stderr, "LLM failures: %s\n", stats.llm_failure);
  }
  tlr_llm_free(llm);
  tlr_device_free(device);
  return status == TLR_OK ? 0 : Fail("generate", status);
}
