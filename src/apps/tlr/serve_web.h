// `tlr serve --web DIR` (apps layer): the web UI's page with the SLM in the visitor's tab. The
// page (the same embedded files as `tlr ui`'s) learns from GET /api/info that it runs in tab mode
// and where its models are, loads the browser build from DIR (`make wasm`: build-wasm/web) and
// the SLM and router from this server, and sends the router's doubted tokens to this server's
// native protocol (same origin: no CORS needed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/web_files.h"
#include "util/status.h"

namespace tlr::cli {

struct ServeWebArgs {
  std::string dir;           // the browser build: tlr.js, tlr_worker.js, tlr.mjs, tlr.wasm (+ scalar, threads)
  std::string slm, router;   // what the tab runs (a GGUF each; router may be a built-in kind)
  std::string data;          // question set (JSONL) for the example prompts; empty: none
  int examples = 5;
  std::string llm_name;      // this server's model, shown in the page
  int64_t max_context = 4096;
  bool needs_key = false;    // the server wants an API key: the page asks for one
};

// The files to serve, after checking that DIR holds the browser build and that the SLM and router
// load and fit each other (errors name the file and what to do).
Expected<std::vector<WebFile>> WebUiFiles(const ServeWebArgs& a);

}  // namespace tlr::cli
