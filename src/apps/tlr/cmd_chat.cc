// `tlr chat`: an interactive conversation in the terminal with token-level routing (apps layer),
// as llama-cli's conversation mode or `ollama run`: the LLM's tokens in red, slash commands to
// change the routing, see statistics, save and load the conversation. The conversation keeps
// its SLM cache and its LLM session (DeviceContext), so each turn prefills only what is new.
// Works when stdin is not a terminal (one message per line), so it can be scripted and tested.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "device/session/context_file.h"
#include "device/session/device_session.h"
#include "model/chat_messages.h"
#include "ops/thread_pool.h"
#include "util/mapped_file.h"

namespace tlr::cli {

namespace chat_cmd {

constexpr const char* kLlmColor = "\x1b[31m";
constexpr const char* kFallbackColor = "\x1b[33;4m";
constexpr const char* kDim = "\x1b[2m";
constexpr const char* kOff = "\x1b[0m";

constexpr const char* kHelp =
    "/threshold X   route when the router's confidence is below X (0..1)\n"
    "/mode M        joint, small_only or large_only\n"
    "/stats         the last reply's and the conversation's statistics\n"
    "/save FILE     save the conversation (FILE: its messages as JSON; FILE.ctx: the SLM's cache)\n"
    "/load FILE     load a saved conversation (the SLM's cache too, when FILE.ctx fits this SLM)\n"
    "/clear         start a new conversation\n"
    "/help          this list\n"
    "/quit          leave (also Ctrl-D)\n"
    "Ctrl-C         stop the reply being written (at the prompt: leave)\n";

// Ctrl-C on a terminal: the first stops the reply being written (the decoder's cancel flag) or,
// at the prompt, ends the read (no SA_RESTART) and so the chat; a second one while the first is
// being handled ends the process as usual.
std::atomic<bool> interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void OnInterrupt(int) {
  if (interrupted.load()) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  interrupted.store(true);
}

// Totals over the conversation.
struct Totals {
  int64_t turns = 0, prompt = 0, reused = 0, generated = 0, routed = 0, llm_prefilled = 0, llm_generated = 0;
};

}  // namespace chat_cmd

Command AddChatCommand(CLI::App& root) {
  auto p = std::make_shared<Params>();
  p->max_tokens = 256;
  CLI::App* app = root.add_subcommand(
      "chat", "Chat in the terminal with token-level routing (the LLM's tokens in red; /help for commands)");
  AddOptions(app, kCmdChat, p.get());
  app->footer(std::string("Commands (on a line of their own):\n") + chat_cmd::kHelp +
              "Examples:\n"
              "  tlr chat                                     # the bundled demo pair\n"
              "  tlr chat --slm qwen2.5-0.5b-instruct.gguf --router r.gguf --server http://gpu-box:8080\n"
              "  printf 'hi\\nand then?\\n' | tlr chat --no-color   # scripted: one message per line");
  return MakeCommand(app, p, nullptr, [p](const std::string& cmd) -> int {
            auto pair = LoadPair(*p, PairNeeds{});  // all three: /mode may switch to any
            if (!pair.ok()) return ReportError(cmd, pair.status().message());
            LlmTarget& llm = pair->llm;
            const bool remote = p->remote();
            const Model& slm = *pair->slm;
            if (remote) {  // the server is checked once, at start; a later turn while it is down gets FALLBACK tokens
              auto check = LlmStack::Create(llm.config, nullptr, 0, slm.tokenizer());
              if (!check.ok()) return ReportError(cmd, check.status().message());
              if (!(*check)->warning().empty()) std::fprintf(stderr, "warning: %s\n", (*check)->warning().c_str());
              llm.config.remote.require_reachable = false;
            }
            Router* router = pair->router.get();
            DecodeOptions d = pair->decode;
            ThreadPool pool(p->threads);
            const bool tty_in = isatty(STDIN_FILENO), color = !p->no_color && isatty(STDOUT_FILENO);
            int failed_turns = 0;
            if (tty_in) {
              struct sigaction sa {};
              sa.sa_handler = chat_cmd::OnInterrupt;
              sigemptyset(&sa.sa_mask);
              sa.sa_flags = 0;  // no SA_RESTART: Ctrl-C at the prompt ends the read
              sigaction(SIGINT, &sa, nullptr);
              d.cancel = &chat_cmd::interrupted;
            }
            auto context = std::make_unique<DeviceContext>();
            context->slm.n_ctx = p->ctx;
            std::vector<ChatMessage> messages;
            if (!p->system.empty()) messages.push_back({"system", p->system});
            chat_cmd::Totals totals;
            DeviceRunResult last;
            bool have_last = false;
            auto note = [&](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
            if (tty_in) {
              note("tlr chat: " + std::filesystem::path(p->slm).filename().string() + " + " +
                   (remote ? p->server.url : std::filesystem::path(p->llm).filename().string()) +
                   ", threshold " + std::to_string(d.threshold).substr(0, 5) + " (/help for commands, Ctrl-D to leave)");
            }
            std::string line;
            for (;;) {
              if (tty_in) std::cout << (color ? std::string(chat_cmd::kDim) + "> " + chat_cmd::kOff : "> ") << std::flush;
              if (!std::getline(std::cin, line)) break;
              if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // nothing said
              if (line[0] == '/') {
                std::istringstream in(line);
                std::string c, arg;
                in >> c;
                std::getline(in >> std::ws, arg);
                if (c == "/quit" || c == "/exit") break;
                if (c == "/help") {
                  std::fputs(chat_cmd::kHelp, stderr);
                } else if (c == "/threshold") {
                  char* end = nullptr;
                  const float t = std::strtof(arg.c_str(), &end);
                  if (arg.empty() || *end != '\0' || !(t >= 0.0f && t <= 1.0f)) {
                    note("/threshold wants a number in [0, 1], got '" + arg + "'");
                  } else {
                    d.threshold = t;
                    note("threshold " + arg);
                  }
                } else if (c == "/mode") {
                  auto m = ParseDecodeMode(arg);
                  if (!m.ok()) {
                    note("/mode: " + m.status().message());
                  } else {
                    d.mode = *m;
                    note("mode " + arg);
                  }
                } else if (c == "/clear") {
                  messages.clear();
                  if (!p->system.empty()) messages.push_back({"system", p->system});
                  context = std::make_unique<DeviceContext>();
                  context->slm.n_ctx = p->ctx;
                  totals = {};
                  have_last = false;
                  note("a new conversation");
                } else if (c == "/stats") {
                  if (have_last) std::fputs(FormatDecodeSummary(last.stats).c_str(), stderr);
                  char b[512];
                  std::snprintf(b, sizeof b,
                                "conversation: %lld turns; prompt tokens %lld (%lld reused from the cache, %lld "
                                "prefilled); %lld generated, %lld routed; the LLM prefilled %lld and generated %lld",
                                static_cast<long long>(totals.turns), static_cast<long long>(totals.prompt),
                                static_cast<long long>(totals.reused), static_cast<long long>(totals.prompt - totals.reused),
                                static_cast<long long>(totals.generated), static_cast<long long>(totals.routed),
                                static_cast<long long>(totals.llm_prefilled), static_cast<long long>(totals.llm_generated));
                  note(b);
                } else if (c == "/save") {
                  if (arg.empty()) {
                    note("/save wants a file name");
                    continue;
                  }
                  if (messages.empty()) {  // /load refuses a conversation without messages
                    note("/save: nothing to save yet");
                    continue;
                  }
                  nlohmann::json j = {{"messages", nlohmann::json::array()}};
                  for (const ChatMessage& m : messages) j["messages"].push_back({{"role", m.role}, {"content", m.content}});
                  const std::string text = j.dump(2);
                  Status st = WriteFileAtomic(arg, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
                  if (st.ok() && context->slm.has_cache()) st = SaveSlmContext(arg + ".ctx", slm, context->slm);
                  note(st.ok() ? "saved " + arg : "/save: " + st.message());
                } else if (c == "/load") {
                  auto text = ReadFileToString(arg);
                  if (!text.ok()) {
                    note("/load: " + text.status().message());
                    continue;
                  }
                  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
                  auto parsed = j.is_object() && j.contains("messages") ? ParseChatMessages(j["messages"])
                                                                         : ParseChatMessages(j);
                  if (j.is_discarded() || !parsed.ok()) {
                    note("/load: " + arg + ": " +
                         (j.is_discarded() ? "not JSON (" + JsonErrorIn(*text) + ")" : parsed.status().message()));
                    continue;
                  }
                  messages = std::move(parsed).value();
                  context = std::make_unique<DeviceContext>();
                  context->slm.n_ctx = p->ctx;
                  if (auto c2 = LoadSlmContext(arg + ".ctx", slm, p->ctx); c2.ok()) {
                    context->slm = std::move(c2).value();
                    note("loaded " + arg + " (" + std::to_string(messages.size()) + " messages, the SLM's cache " +
                         std::to_string(context->slm.tokens.size()) + " tokens)");
                  } else {
                    note("loaded " + arg + " (" + std::to_string(messages.size()) +
                         " messages; the next turn prefills them: " + c2.status().message() + ")");
                  }
                } else {
                  note("unknown command " + c + " (/help)");
                }
                continue;
              }
              messages.push_back({"user", line});
              auto ids = EncodeMessages(slm, messages, p->think);
              if (!ids.ok()) {
                messages.pop_back();
                note("error: " + ids.status().message());
                ++failed_turns;
                continue;
              }
              if (static_cast<int64_t>(ids->size()) + d.max_tokens > p->ctx) {
                messages.pop_back();
                note("error: the conversation's " + std::to_string(ids->size()) + " tokens + max tokens " +
                     std::to_string(d.max_tokens) + " exceed the context of " + std::to_string(p->ctx) +
                     " tokens: /clear starts over (or raise --ctx)");
                ++failed_turns;
                continue;
              }
              std::string reply;
              auto run = RunDeviceGeneration(slm, router, &llm, &pool, *ids, d, [&](const TokenEvent& ev) {
                if (ev.end || ev.text.empty()) return true;
                reply += ev.text;
                const char* on = ev.source == TokenSource::kLlm ? chat_cmd::kLlmColor
                                 : ev.source == TokenSource::kFallback ? chat_cmd::kFallbackColor : nullptr;
                if (color && on) std::cout << on << ev.text << chat_cmd::kOff;
                else std::cout << ev.text;
                std::cout.flush();
                return true;
              }, [&](const std::string& w) { note("warning: " + w); }, nullptr, context.get());
              std::cout << "\n" << std::flush;
              if (chat_cmd::interrupted.exchange(false)) {
                note("[stopped: the reply so far stays in the conversation]");
              }
              if (!run.ok()) {
                messages.pop_back();
                note("error: " + run.status().message());
                ++failed_turns;
                continue;
              }
              messages.push_back({"assistant", reply});
              last = std::move(run).value();
              have_last = true;
              const DecodeStats& s = last.stats;
              ++totals.turns;
              totals.prompt += s.prompt_tokens;
              totals.reused += s.prompt_reused;
              totals.generated += s.generated;
              totals.routed += s.routed;
              totals.llm_prefilled += s.llm_work.prefilled;
              totals.llm_generated += s.llm_work.generated;
              // Every turn says where its tokens came from (on a terminal the LLM's are also red).
              char b[256];
              std::snprintf(b, sizeof b, "[%lld tokens, %lld routed to the LLM, %lld fallbacks; prompt %lld tokens, %lld "
                            "from the cache]", static_cast<long long>(s.generated), static_cast<long long>(s.routed),
                            static_cast<long long>(s.fallbacks), static_cast<long long>(s.prompt_tokens),
                            static_cast<long long>(s.prompt_reused));
              note(color ? std::string(chat_cmd::kDim) + b + chat_cmd::kOff : std::string(b));
            }
            // A script (stdin not a terminal) learns from the exit status that a turn failed.
            if (!tty_in && failed_turns > 0) {
              std::fprintf(stderr, "tlr chat: %d turn%s failed\n", failed_turns, failed_turns == 1 ? "" : "s");
              return 1;
            }
            return 0;
          });
}

}  // namespace tlr::cli
