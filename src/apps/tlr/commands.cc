// Helpers the `tlr` subcommands share (apps layer). See commands.h.
#include "apps/tlr/commands.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>
#include <iostream>
#include <iterator>

#include "apps/tlr/options.h"
#include "util/mapped_file.h"

namespace tlr::cli {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnStopSignal(int) { g_stop = 1; }

// The long name of an option ("--trace"), or its positional name.
std::string OptionName(const CLI::Option* o) {
  const auto& l = o->get_lnames();
  if (!l.empty()) return "--" + l.front();
  return o->get_name();
}

// Numbers: CLI11's range checks let NaN through (every comparison with it is false), and an
// unsigned option takes "-1" as 2^64 - 1.
Status CheckNumbers(const CLI::App* app) {
  for (const CLI::Option* o : app->get_options()) {
    if (o->count() == 0 || o->get_items_expected_min() == 0) continue;
    const std::string type = o->get_type_name();
    const bool is_float = type.rfind("FLOAT", 0) == 0, is_unsigned = type.rfind("UINT", 0) == 0;
    if (!is_float && !is_unsigned) continue;
    for (const std::string& v : o->results()) {
      if (is_float) {
        char* end = nullptr;
        const double d = std::strtod(v.c_str(), &end);
        if (!std::isfinite(d)) return Status::Error(OptionName(o) + ": '" + v + "' is not a finite number");
      } else if (v.find('-') != std::string::npos) {
        return Status::Error(OptionName(o) + ": '" + v + "' is negative; it takes a number >= 0");
      }
    }
  }
  return Status::Ok();
}

// What the command-line paths are. Outputs are written after the work, so what would fail there
// or destroy an input is refused before it.
enum class PathKind { kInput, kFile, kFolder, kPrefix };
PathKind KindOf(const std::string& name, const std::string& command) {
  if (name == "--answers" || name == "--trace" || name == "--json") return PathKind::kFile;
  if (name == "--out") return command == "eval" ? PathKind::kFolder : PathKind::kFile;
  if (name == "--dump-features" || name == "--work-dir") return PathKind::kFolder;
  if (name == "--logits-out") return PathKind::kPrefix;  // FILE.f32 and FILE.json
  return PathKind::kInput;
}
bool IsPathOption(const std::string& name) {
  static const char* const kPaths[] = {"--slm", "--llm", "--router", "--model", "--data", "--messages", "--file",
                                       "--from", "--check", "--tokenizer", "--vocab", "--accept-key-file", "--ca-file",
                                       "--tls-cert", "--tls-key", "--llm-tokenizer", "--chat-template", "--web",
                                       "--web-data", "--web-slm", "--web-router", "--results", "--answers", "--trace",
                                       "--out", "--dump-features", "--work-dir", "--logits-out", "--json"};
  for (const char* k : kPaths) {
    if (name == k) return true;
  }
  return false;
}

// A path resolved whether or not it exists yet ("dir/" is "dir"); empty on error.
std::string Resolved(std::string x) {
  namespace fs = std::filesystem;
  while (x.size() > 1 && x.back() == '/') x.pop_back();
  std::error_code ec;
  const fs::path r = fs::weakly_canonical(fs::absolute(x, ec), ec);
  return ec ? std::string() : r.string();
}

// The same file or folder; for paths not made yet, the same path once resolved.
bool SameFile(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec) && !ec) return true;
  const std::string ra = Resolved(a), rb = Resolved(b);
  return !ra.empty() && ra == rb;
}

}  // namespace

Status CheckPathArgs(const CLI::App* app, const std::string& command, const Params& p) {
  namespace fs = std::filesystem;
  struct Path {
    std::string flag, path;
  };
  std::vector<Path> inputs, files, folders;
  for (const CLI::Option* o : app->get_options()) {
    if (o->count() == 0 || o->get_items_expected_min() == 0) continue;
    const std::string name = OptionName(o);
    const bool path_option = IsPathOption(name);
    if (!path_option && !o->get_positional()) continue;  // a value, not a path (--preset tiny)
    for (const std::string& v : o->results()) {
      if (path_option && v.empty()) return Status::Error(name + ": the path is empty");
      if (v.empty() || v == "-") continue;
      switch (path_option ? KindOf(name, command) : PathKind::kInput) {
        case PathKind::kInput: inputs.push_back({name, v}); break;  // positionals: files or not
        case PathKind::kFile: files.push_back({name, v}); break;
        case PathKind::kFolder: folders.push_back({name, v}); break;
        case PathKind::kPrefix:
          files.push_back({name, v + ".f32"});
          files.push_back({name, v + ".json"});
          break;
      }
    }
  }
  // The demo files the command reads when none were named.
  for (const std::string* f : {&p.slm, &p.llm, &p.router, &p.model, &p.data}) {
    if (!f->empty()) inputs.push_back({"", *f});
  }
  for (const Path& out : files) {
    std::error_code ec;
    if (fs::is_directory(out.path, ec)) return Status::Error(out.flag + " '" + out.path + "' is a folder: give a file name");
    const fs::path parent = fs::path(out.path).parent_path();
    // A folder option's path is made whole (create_directories) before anything is written:
    // eval --out runs/r1 --answers runs/r1/a.jsonl, or --answers runs/a.jsonl.
    bool made = false;
    for (const Path& dir : folders) {
      const std::string rp = Resolved(parent.string()), rd = Resolved(dir.path);
      made = made || (!rd.empty() && !rp.empty() && (rd == rp || rd.rfind(rp + "/", 0) == 0));
    }
    if (!parent.empty() && !made && !fs::is_directory(parent, ec)) {
      return Status::Error(out.flag + " '" + out.path + "': the folder '" + parent.string() + "' does not exist");
    }
    for (const Path& in : inputs) {
      // router calibrate -o ROUTER rewrites the router in place, as its help says.
      if (command == "router calibrate" && out.flag == "--out" && in.path == p.router) continue;
      if (!fs::is_regular_file(in.path, ec)) continue;  // a tty or pipe read and written is no loss
      if (SameFile(in.path, out.path)) {
        return Status::Error(out.flag + " '" + out.path + "' is an input of this command (" +
                             (in.flag.empty() ? std::string("the default ") + "'" + in.path + "'" : in.flag + " " + in.path) +
                             "): writing it would replace it; give another file");
      }
    }
  }
  for (const Path& dir : folders) {
    std::error_code ec;
    if (fs::exists(dir.path, ec) && !fs::is_directory(dir.path, ec)) {
      return Status::Error(dir.flag + " '" + dir.path + "' is a file, not a folder");
    }
    for (const Path& other : folders) {
      if (&other != &dir && SameFile(dir.path, other.path)) {
        return Status::Error(dir.flag + " and " + other.flag + " name the same folder '" + dir.path +
                             "': each writes its own files there; give two folders");
      }
    }
  }
  return Status::Ok();
}

Command MakeCommand(CLI::App* app, std::shared_ptr<Params> p, std::function<nlohmann::json()> own, CommandFn run) {
  return {app, [app, p, own, run]() -> int {
            const CLI::App* parent = app->get_parent();
            const std::string name =
                parent && parent->get_parent() ? parent->get_name() + " " + app->get_name() : app->get_name();
            Status st = CheckNumbers(app);
            if (st.ok()) st = Resolve(app, p.get());
            if (st.ok()) st = CheckPathArgs(app, name, *p);
            if (!st.ok()) return ReportError(name, st.message());
            if (p->print_params) {
              nlohmann::json j = ToJson(*p);
              j["command"] = name;
              j["own"] = own ? own() : nlohmann::json::object();
              std::printf("%s\n", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
              return 0;
            }
            return run(name);
          }};
}

Expected<std::string> ReadTextArg(const std::string& path) {
  if (path == "-") return ReadStdin();
  return ReadFileToString(path);
}

Expected<std::string> PromptText(const std::string& text, const std::string& file) {
  if (file.empty()) return text;
  return ReadTextArg(file);
}

std::string JsonErrorIn(const std::string& text) {
  try {
    const nlohmann::json parsed = nlohmann::json::parse(text);
    (void)parsed;
  } catch (const nlohmann::json::parse_error& e) {
    std::string m = e.what();  // "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    const size_t at = m.find("] ");
    return at == std::string::npos ? m : m.substr(at + 2);
  }
  return "not JSON";
}

bool ParseBytes(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    return false;
  }
  if (!(v > 0) || !std::isfinite(v)) return false;  // NaN and infinity too
  std::string unit = s.substr(pos);
  double mul = 1;
  if (unit == "" || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KiB" || unit == "k") mul = 1024.0;
  else if (unit == "M" || unit == "MiB") mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") mul = 1024.0 * 1024 * 1024;
  else return false;
  if (v * mul >= 9.2e18) return false;  // past what a byte count holds (was cast to garbage)
  *out = static_cast<uint64_t>(v * mul);
  return *out > 0;
}

const CLI::Validator& WholeNumberU64() {
  static const CLI::Validator v(
      [](std::string& text) -> std::string {
        if (!text.empty() && text[0] == '-') return "";
        errno = 0;
        char* end = nullptr;
        std::strtoull(text.c_str(), &end, 10);
        const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        return digits && errno != ERANGE && *end == '\0' ? "" : "not a whole number from 0 to 18446744073709551615";
      },
      "UINT64");
  return v;
}

void WarnPastTrainedContext(int64_t tokens, int64_t trained, const std::string& model_path) {
  if (trained <= 0 || tokens <= trained) return;
  std::fprintf(stderr, "warning: the prompt and the new tokens may reach %lld tokens, past the %lld the model (%s) was "
                       "trained on: what it writes past that is unreliable (a shorter prompt or -n)\n",
               static_cast<long long>(tokens), static_cast<long long>(trained),
               std::filesystem::path(model_path).filename().string().c_str());
}

void InstallStopSignals() {
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGPIPE, SIG_IGN);
}

int ServeUntilStopSignal(const std::string& cmd, const std::function<void()>& stop) {
  std::fflush(stdout);
  while (!g_stop) ::usleep(100 * 1000);
  std::fprintf(stderr, "tlr %s: stopping\n", cmd.c_str());
  stop();
  return 0;
}

}  // namespace tlr::cli
