// The dtrain command: parses the command line, runs the chosen subcommand, and turns every error
// into one line on stderr and an exit code (1 bad usage, 2 bad input, 3 internal error, 4 a rank
// failed or a deadline passed: worth a restart), never a
// stack trace.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "commands.h"
#include "dtrain/base/allocator_tuning.h"
#include "dtrain/base/error.h"
#include "dtrain/base/timeline.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/rank_threads.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/train/fork_server.h"
#include "dtrain/train/standby.h"

namespace {

// Messages are printed on one line whatever they contain.
std::string one_line(std::string text) {
  for (char& ch : text) {
    if (ch == '\n' || ch == '\r') ch = ' ';
  }
  return text;
}

// Prints a run's last error line (and keeps it for a supervisor: base/error.h).
void report(const std::string& line) {
  fmt::print(stderr, "{}\n", line);
  dtrain::append_to_error_file(line);
}

// The innermost command the parser entered: `dtrain` itself, `dtrain bench`, ...
const CLI::App* innermost(const CLI::App& app) {
  const CLI::App* at = &app;
  for (bool deeper = true; deeper;) {
    deeper = false;
    for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->parsed()) {
        at = sub;
        deeper = true;
        break;
      }
    }
  }
  return at;
}

// The names from `dtrain` down to `at`: {"bench", "scaling"}.
std::vector<std::string> command_chain(const CLI::App& app, const CLI::App* at) {
  std::vector<std::string> chain;
  for (const CLI::App* a = at; a != &app; a = a->get_parent()) {
    chain.insert(chain.begin(), a->get_name());
  }
  return chain;
}

// "dtrain", "dtrain bench scaling": the command line that reaches `at`.
std::string command_path(const CLI::App& app, const CLI::App* at) {
  std::string path = app.get_name();
  for (const auto& name : command_chain(app, at)) path += " " + name;
  return path;
}

// For a command that needs a subcommand and got none: names the word the user gave instead (if
// any) and the accepted ones. CLI11 says only "A subcommand is required". Empty otherwise.
std::string missing_subcommand_message(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = innermost(app);
  const auto subs = at->get_subcommands([](const CLI::App*) { return true; });
  if (subs.empty()) return {};
  std::string names;
  for (const CLI::App* sub : subs) {
    if (sub->parsed()) return {};
    names += fmt::format("{}{}", names.empty() ? "" : ", ", sub->get_name());
  }
  const std::string path = command_path(app, at);
  const std::vector<std::string> chain = command_chain(app, at);
  // The first word after the chain that is not an option.
  std::size_t matched = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') continue;
    if (matched < chain.size() && word == chain[matched]) {
      ++matched;
      continue;
    }
    return fmt::format("unknown command '{}' for `{}`: the commands are {}; see `{} --help`", word,
                       path, names, path);
  }
  return fmt::format("`{}` needs a command: {}; see `{} --help`", path, names, path);
}

}  // namespace

int main(int argc, char** argv) {
  using dtrain::apps::Command;
  dtrain::apps::set_command_line(argc, argv);
  dtrain::tune_allocator_for_training();
  dtrain::timeline_mark("main");
  dtrain::train::name_standby_process();        // a warm standby (train/standby.h) says so in ps
  dtrain::train::name_fork_template_process();  // so does a fork server's template
  CLI::App app("dtrain: distributed training of neural networks", "dtrain");
  app.set_version_flag("--version", fmt::format("dtrain {}", dtrain::apps::kVersion));
  app.require_subcommand(1);
  app.footer("Run `dtrain <command> --help` for a command's options and examples.");
  const std::vector<Command> commands = {
      dtrain::apps::add_train_command(app),    dtrain::apps::add_sweep_command(app),
      dtrain::apps::add_config_command(app),   dtrain::apps::add_bench_command(app),
      dtrain::apps::add_generate_command(app), dtrain::apps::add_check_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Under mpirun every process parses the same command line: one copy of a usage error is
    // enough (the others exit with the same code, and mpirun ends the job).
    if (dtrain::comm::launcher_rank() != 0) return 1;
    if (const std::string message = missing_subcommand_message(app, argc, argv); !message.empty()) {
      fmt::print(stderr, "error: {}\n", message);
      return 1;
    }
    fmt::print(stderr, "error: {}; see `{} --help`\n", one_line(e.what()),
               command_path(app, innermost(app)));
    return 1;
  }
  // Rank threads left running after an error (comm::spawn_ranks gave up waiting for them) may
  // still use what static destructors free: end without running them.
  const auto finish = [](int code) {
    if (dtrain::comm::detached_rank_threads() > 0) {
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(code);
    }
    return code;
  };
  try {
    for (const auto& command : commands) {
      if (command.app->parsed()) return finish(command.run());
    }
    return 1;
  } catch (const dtrain::InternalError& e) {
    report(fmt::format("error: internal: {}", one_line(e.what())));
    return finish(3);
  } catch (const dtrain::comm::CommError& e) {
    // A rank that failed or a deadline that passed: the run may succeed when started again, so
    // a supervisor (--max-restarts) restarts on this code and not on 2.
    report(fmt::format("error: {}", one_line(e.what())));
    return finish(4);
  } catch (const dtrain::Error& e) {
    report(fmt::format("error: {}", one_line(e.what())));
    return finish(2);
  } catch (const std::bad_alloc&) {
    // The run's estimate (train/memory_budget.h) counts parameters, gradients and optimizer
    // state, not activations or scratch: what it let through still did not fit.
    report(
        "error: memory ran out (std::bad_alloc); the start-up estimate counts parameters, "
        "gradients and optimizer state but not activations: use a smaller model or "
        "train.batch_size, fewer workers per process, or --zero-stage 1");
    return finish(2);
  } catch (const std::exception& e) {
    report(fmt::format("error: internal: {}", one_line(e.what())));
    return finish(3);
  }
}
