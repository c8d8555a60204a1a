// The strategies dtrain trains with, by name (parallel.strategy): one table, which the config's
// accepted values, `dtrain train --help`, the launcher and the Trainer all read. Adding a strategy
// is one folder under strategies/, one entry here, its config section (named like the strategy)
// and its tests
// (docs/ARCHITECTURE.md, "Adding a strategy").
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/train/config.h"
#include "dtrain/train/metrics.h"
#include "dtrain/train/run_data.h"

namespace dtrain::train {

class Strategy;
struct StrategyContext;
struct TrainerOptions;

struct StrategyInfo {
  std::string_view name;     // the parallel.strategy value
  std::string_view summary;  // one line for --help and `dtrain config`
  std::string_view docs;     // where a user reads more
  // This rank's strategy inside a Trainer. Most strategies run one Trainer per rank; null for a
  // strategy whose run is not a Trainer per rank (run_whole).
  std::function<std::unique_ptr<Strategy>(const StrategyContext&)> make;
  // How many ranks a run starts as threads when no launcher (mpirun) started processes; null:
  // parallel.workers.
  std::function<int(const Config&)> thread_ranks;
  // A rank's whole part when it is more than one Trainer with `make` (parameter servers: a rank
  // serves or works); null: a Trainer with `make`. Returns rank 0's summary, nothing elsewhere.
  std::function<std::optional<RunSummary>(comm::Communicator&, const Config&, const TrainerOptions&,
                                          const std::shared_ptr<const RunData>&)>
      run_rank;
  // The whole run, when its workers are not ranks of a communicator (Hogwild!: threads updating
  // one parameter vector); null: ranks started by the launcher.
  std::function<RunSummary(const Config&, const TrainerOptions&)> run_whole;
  // Rank threads with one compute thread each are bound to distinct CPUs when they fit (launch.cc);
  // false where a rank runs extra threads of its own (colocated parameter servers).
  bool pin_ranks = false;
  // Whether its ranks train the Trainer's model, so that a model built in code
  // (TrainerOptions::make_model, docs/LIBRARY.md) trains under it; false where the strategy builds
  // its model from model.name in code of its own (parameter servers, Hogwild!, tensor parallelism).
  bool takes_model_factory = false;
};

// Every strategy, in the order `--help` lists them.
const std::vector<StrategyInfo>& strategy_registry();

// Nothing when `info` takes a model built in code (takes_model_factory); else a ConfigError naming
// the strategies that do.
void check_takes_model_factory(const StrategyInfo& info);

// The entry named `name`; ConfigError naming the accepted names otherwise.
const StrategyInfo& find_strategy(std::string_view name);
// The entry named `name`, or null.
const StrategyInfo* find_strategy_or_null(std::string_view name);

// "data_parallel, parameter_server, hogwild, local_sgd": for messages.
std::string strategy_names();

}  // namespace dtrain::train
