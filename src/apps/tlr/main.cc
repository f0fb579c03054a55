// `tlr`: the one command-line entry point of TLR (apps layer). Thin: parses the command line
// with CLI11 and hands over to the chosen subcommand.
#include <iostream>
#include <string>
#include <vector>

#include "apps/tlr/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "TLR: token-level routing between a small on-device language model and a large\n"
      "server model. Run `tlr <command> --help` for the options of a command."};
  app.set_version_flag("--version", "tlr 0.1.0");
  app.require_subcommand(1);
  app.fallthrough(false);
  std::vector<tlr::cli::Command> commands;
  for (tlr::cli::AddCommandFn* add :
       {tlr::cli::AddInfoCommand, tlr::cli::AddTokenizeCommand, tlr::cli::AddRunCommand, tlr::cli::AddGenerateCommand,
        tlr::cli::AddChatCommand, tlr::cli::AddRouterCommand, tlr::cli::AddEvalCommand, tlr::cli::AddServeCommand,
        tlr::cli::AddLoadtestCommand, tlr::cli::AddUiCommand, tlr::cli::AddBenchCommand,
        tlr::cli::AddMakeRandomCommand, tlr::cli::AddConvertCommand}) {
    commands.push_back(add(app));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A word where a command belongs ("tlr bogus", "tlr router bogus"): CLI11 says only that a
    // subcommand is required; name the word and the commands there are.
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && std::string(e.what()).find("subcommand") != std::string::npos) {
      const CLI::App* at = &app;
      std::string path = "tlr";
      for (int i = 1; i < argc; ++i) {
        if (argv[i][0] == '-') break;
        const CLI::App* sub = nullptr;
        for (const CLI::App* s : at->get_subcommands({})) {
          if (!s->get_name().empty() && s->get_name() == argv[i]) sub = s;
        }
        if (sub) {
          at = sub;
          path += " " + sub->get_name();
          continue;
        }
        std::string names;
        for (const CLI::App* s : at->get_subcommands({})) {
          if (!s->get_name().empty()) names += (names.empty() ? "" : ", ") + s->get_name();
        }
        if (names.empty()) break;  // a command without subcommands: CLI11's own message
        std::cerr << "tlr: unknown command '" << argv[i] << "' (" << (at == &app ? "commands" : "subcommands") << ": "
                  << names << "); `" << path << " --help` lists them\n";
        return 2;
      }
    }
    // --help/--version exit 0; every usage error exits 2 (runtime errors exit 1).
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (auto& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  std::cerr << app.help();
  return 2;
}
