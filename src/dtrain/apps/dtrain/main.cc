// The dtrain command: parses the command line, runs the chosen subcommand, and turns every error
// into one line on stderr and an exit code (1 bad usage, 2 bad input, 3 internal error), never a
// stack trace.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "commands.h"
#include "dtrain/base/error.h"

namespace {

// Messages are printed on one line whatever they contain.
std::string one_line(std::string text) {
  for (char& ch : text) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  using dtrain::apps::Command;
  CLI::App app("dtrain: distributed training of neural networks", "dtrain");
  app.set_version_flag("--version", fmt::format("dtrain {}", dtrain::apps::kVersion));
  app.require_subcommand(1);
  app.footer("Run `dtrain <command> --help` for a command's options and examples.");
  const std::vector<Command> commands = {
      dtrain::apps::add_train_command(app), dtrain::apps::add_sweep_command(app),
      dtrain::apps::add_config_command(app), dtrain::apps::add_bench_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string hint = "dtrain --help";
    for (const auto& command : commands) {
      if (command.app->parsed()) hint = fmt::format("dtrain {} --help", command.app->get_name());
    }
    fmt::print(stderr, "error: {}; see `{}`\n", one_line(e.what()), hint);
    return 1;
  }
  try {
    for (const auto& command : commands) {
      if (command.app->parsed()) return command.run();
    }
    return 1;
  } catch (const dtrain::InternalError& e) {
    fmt::print(stderr, "error: internal: {}\n", one_line(e.what()));
    return 3;
  } catch (const dtrain::Error& e) {
    fmt::print(stderr, "error: {}\n", one_line(e.what()));
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: internal: {}\n", one_line(e.what()));
    return 3;
  }
}
