// dtrain config: shows every config key with its meaning, accepted values and current value.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "dtrain/train/config.h"

namespace dtrain::apps {

Command add_config_command(CLI::App& app) {
  struct Flags {
    std::string config;
    std::vector<std::string> sets;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* sub = app.add_subcommand(
      "config",
      "Prints a configuration as commented TOML: the defaults, or --config FILE with --set "
      "overrides applied and checked. `dtrain config > my.toml` starts a new config.");
  sub->add_option("--config,-c", flags->config, "TOML config file to resolve");
  sub->add_option("--set,-s", flags->sets, "override one config key (repeatable)")
      ->type_name("KEY=VALUE");
  return Command{sub, [flags] {
                   const train::Config config =
                       flags->config.empty() ? train::parse_config("", "(defaults)", flags->sets)
                                             : train::load_config(flags->config, flags->sets);
                   fmt::print("{}", train::to_toml(config));
                   return 0;
                 }};
}

}  // namespace dtrain::apps
