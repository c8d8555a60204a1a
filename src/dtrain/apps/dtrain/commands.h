// The subcommands of `dtrain`. Each add_*_command registers its flags on the top-level app and
// returns a Command whose run() is called by main() when the user chose it; main() alone turns
// errors into messages and exit codes, so a command just throws.
//
// A new subcommand is one more add_* function here and one line in main.cc.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::apps {

// From project(VERSION ...) in the top-level CMakeLists.txt.
inline constexpr const char* kVersion = DTRAIN_VERSION;

struct Command {
  CLI::App* app = nullptr;   // the subcommand, to ask whether it was chosen
  std::function<int()> run;  // returns the exit code
};

// runs/<prefix><config file stem>-<YYYYmmdd-HHMMSS>, in the current folder: the default run (or
// sweep) folder of a command given `config_path`.
std::string default_out_dir(const std::string& config_path, const std::string& prefix = "");

// main() keeps argv here before parsing: a supervised `dtrain train --max-restarts` starts its
// child from it.
void set_command_line(int argc, char** argv);
const std::vector<std::string>& command_line();

// dtrain train: trains a model from a config file, or resumes a run folder.
Command add_train_command(CLI::App& app);

// dtrain bench train|gemm|collectives: measured samples/s, GFLOP/s and bus bandwidth, as a table
// or JSON.
Command add_bench_command(CLI::App& app);

// dtrain sweep: a grid of training runs (workers x algorithms x any key) and their comparison.
Command add_sweep_command(CLI::App& app);

// dtrain generate: continues a prompt with text sampled from a gpt run's newest checkpoint.
Command add_generate_command(CLI::App& app);

// dtrain check: a pre-flight of the ranks (threads or an mpirun job): reachability, each pair's
// latency and bandwidth, clock offsets, host names, and a config's data on every rank; a verdict.
Command add_check_command(CLI::App& app);

// dtrain config: prints a configuration (the defaults, or a file with overrides) as commented TOML.
Command add_config_command(CLI::App& app);

}  // namespace dtrain::apps
