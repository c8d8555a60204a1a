// The training and test sets a run's [data] section names, loaded once before training
// (data/load.h does the loading; this maps the config section onto it).
#pragma once

#include "dtrain/data/load.h"
#include "dtrain/train/config.h"

namespace dtrain::train {

using RunData = data::DenseSplits;

// The [data] section as a data::DataSpec.
data::DataSpec data_spec(const DataSection& config);

// The dense training and test sets (data::load_dense).
RunData load_run_data(const DataSection& config);

}  // namespace dtrain::train
