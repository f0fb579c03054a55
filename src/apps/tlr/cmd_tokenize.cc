// `tlr tokenize`: text -> token ids (and pieces), or ids -> text with --decode (apps layer).
// Output matches the way llama.cpp's tokenizer tests compare: the ids of the text alone,
// BOS/EOS only with --add-special.
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <utility>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "model/gguf/gguf_reader.h"
#include "model/tokenizer/tokenizer.h"
#include "util/mapped_file.h"
#include "util/utf8.h"

namespace tlr::cli {
namespace {

std::string Escaped(const std::string& piece) {
  std::string out;
  for (char c : SanitizeUtf8(piece)) {
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\'': out += "\\'"; break;
      case '\\': out += "\\\\"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

// A file's text, or standard input's for "-".
Expected<std::string> ReadInput(const std::string& path) { return ReadTextArg(path); }

}  // namespace

namespace {

struct TokenizeOwn {
  std::string model, tokenizer, pre, file;
  std::vector<std::string> args;
  bool ids_only = false, add_special = false, parse_special = false, decode = false;
  bool render_special = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(TokenizeOwn, model, tokenizer, pre, file, args, ids_only, add_special,
                                   parse_special, decode, render_special)

}  // namespace

Command AddTokenizeCommand(CLI::App& root) {
  auto [app, opts, p] = NewCommand<TokenizeOwn>(
      &root, "tokenize", "Token ids of a text with a model's tokenizer (or text of ids with --decode)");
  auto* src = app->add_option_group("tokenizer source", "Where the tokenizer comes from");
  auto* m = src->add_option("-m,--model", opts->model, "GGUF file whose tokenizer.ggml.* to use");
  auto* t = src->add_option("--tokenizer", opts->tokenizer,
                            "Hugging Face tokenizer.json (tokenizer_config.json beside it is "
                            "read for BOS/EOS)");
  src->require_option(1);
  Example(m, "@demo/llm.gguf");
  Example(t, "@demo/README.md", "!--model");  // instead of -m (one tokenizer source)
  app->add_option("text", opts->args,
                  "Text to tokenize (several arguments are joined by spaces); with --decode, "
                  "token ids");
  Example(app->add_option("-f,--file", opts->file, "Read the text (with --decode: the ids) from a file instead ('-' = stdin)"), "-");
  Example(app->add_flag("--ids-only", opts->ids_only, "Print only the ids, space-separated, on one line"), "");
  Example(app->add_flag("--add-special", opts->add_special,
                "Add BOS/EOS as the tokenizer's metadata says (tokenizer.ggml.add_bos_token)"), "");
  Example(app->add_flag("--parse-special", opts->parse_special,
                "Turn control-token text such as <|im_start|> into its id"), "");
  Example(app->add_flag("--decode", opts->decode, "Arguments are token ids: print their text"), "");
  Example(app->add_flag("--render-special", opts->render_special,
                "With --decode: print control tokens' text instead of nothing"), "");
  Example(app->add_option("--pre", opts->pre,
                  "Override the pre-tokenizer (" + KnownPreTokenizers() + ")"), "gpt2");
  app->footer(
      "Examples:\n"
      "  tlr tokenize -m model.gguf --ids-only \"Hello world\"\n"
      "  tlr tokenize --tokenizer tokenizer.json -f prompt.txt\n"
      "  tlr tokenize -m model.gguf --decode 15496 995");
  AddOptions(app, kCmdTokenize, p.get(), "-m @demo/slm.gguf");
  return MakeCommand(app, p, opts, [opts = opts](const std::string& cmd) -> int {
            TokenizerOptions topts;
            topts.pre_override = opts->pre;
            std::unique_ptr<Tokenizer> tok;
            if (!opts->model.empty()) {
              auto f = GgufFile::Open(opts->model);
              if (!f.ok()) {
                const bool json = opts->model.size() >= 5 && opts->model.compare(opts->model.size() - 5, 5, ".json") == 0;
                return ReportError(cmd, f.status().message() + (json ? " (a tokenizer.json goes to --tokenizer)" : ""));
              }
              auto t = Tokenizer::FromGguf(*f, topts);
              if (!t.ok()) return ReportError(cmd, "'" + opts->model + "': " + t.status().message());
              tok = std::make_unique<Tokenizer>(std::move(t).value());
            } else {
              auto t = Tokenizer::FromHfJsonFile(opts->tokenizer, topts);
              if (!t.ok()) {
                const bool gguf = GgufFile::Open(opts->tokenizer).ok();
                return ReportError(cmd, t.status().message() + (gguf ? " (" + opts->tokenizer + " is a GGUF file: give it "
                                                                       "with -m)" : ""));
              }
              tok = std::make_unique<Tokenizer>(std::move(t).value());
            }
            if (opts->decode) {
              for (auto [flag, given] : {std::pair{"--ids-only", opts->ids_only}, std::pair{"--add-special", opts->add_special},
                                         std::pair{"--parse-special", opts->parse_special}}) {
                if (given) return ReportError(cmd, std::string(flag) + " is for tokenizing text, not for --decode");
              }
              std::vector<std::string> words = opts->args;  // the ids: arguments, or the file's text
              if (!opts->file.empty()) {
                if (!opts->args.empty()) return ReportError(cmd, "give the ids or --file, not both");
                auto text = ReadInput(opts->file);
                if (!text.ok()) return ReportError(cmd, text.status().message());
                words = {std::move(text).value()};
              }
              if (words.empty()) return ReportError(cmd, "give the token ids to decode (arguments or -f FILE)");
              std::vector<int32_t> ids;
              for (const auto& a : words) {
                std::istringstream ss(a);
                std::string w;
                while (ss >> w) {
                  size_t used = 0;
                  long long v = -1;
                  try {
                    v = std::stoll(w, &used);
                  } catch (...) {
                    used = 0;
                  }
                  if (used != w.size()) return ReportError(cmd, "'" + w + "' is not a token id");
                  if (v < 0 || v >= tok->n_vocab()) {
                    return ReportError(cmd, "token id " + w + " is outside the vocabulary (0.." +
                                                       std::to_string(tok->n_vocab() - 1) + ")");
                  }
                  ids.push_back(static_cast<int32_t>(v));
                }
              }
              std::cout << tok->Decode(ids, opts->render_special) << "\n";
              return 0;
            }
            if (opts->render_special) return ReportError(cmd, "--render-special is for --decode (tokenizing prints ids)");
            std::string text;
            if (!opts->file.empty()) {
              if (!opts->args.empty()) return ReportError(cmd, "give the text or --file, not both");
              auto in = ReadInput(opts->file);
              if (!in.ok()) return ReportError(cmd, in.status().message());
              text = std::move(in).value();
            } else {
              if (opts->args.empty()) return ReportError(cmd, "give the text to tokenize (arguments or -f FILE)");
              for (size_t i = 0; i < opts->args.size(); ++i) {
                if (i) text += ' ';
                text += opts->args[i];
              }
            }
            const auto ids = tok->Encode(text, opts->add_special, opts->parse_special);
            if (opts->ids_only) {
              for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
              std::cout << "\n";
            } else {
              for (int32_t id : ids) {
                std::printf("%8d -> '%s'\n", id, Escaped(tok->Piece(id, true)).c_str());
              }
            }
            return 0;
          });
}

}  // namespace tlr::cli
