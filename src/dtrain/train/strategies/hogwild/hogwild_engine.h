// The Hogwild! engine a config names, behind one interface: what a Hogwild! run (hogwild_run.h)
// trains with, and what `dtrain bench scaling` (scaling_benchmark.h) builds once per thread count
// over one copy of the data.
//   model.name "logistic" / "svm"  parallel::Hogwild, per-sample updates of a sparse linear model
//                                   on data.dataset "libsvm" or "sparse-synthetic"
//   model.name "mlp", "lenet5",    parallel::HogwildDense, mini-batches of train.batch_size per
//   or an image layer list         thread step on the dense data sets (no batch norm)
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dtrain/data/sparse_dataset.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/parallel/hogwild.h"
#include "dtrain/parallel/hogwild_dense.h"
#include "dtrain/train/config.h"
#include "dtrain/train/run_data.h"

namespace dtrain::train {

// ConfigError unless optim.name is "sgd" with momentum 0: Hogwild! runs plain SGD.
void check_hogwild_config(const Config& config);

// The learning-rate schedule of a Hogwild! run: one schedule step per epoch (optim.lr and the
// [schedule] keys); batch-size scaling does not apply to per-sample updates.
optim::LrSchedule hogwild_epoch_schedule(const Config& config);

// The data of a Hogwild! run: sparse (train, optional test) for the linear models, dense for the
// MLP. Loaded once; engines keep references to it, so it must outlive them.
struct HogwildData {
  std::optional<data::SparseDataset> sparse_train;
  std::optional<data::SparseDataset> sparse_test;
  std::optional<RunData> dense;
};

// Reads or generates what config.data names for config.model.name; the readers' DataError names a
// missing or malformed file.
HogwildData load_hogwild_data(const Config& config);

// Loss and accuracy of either engine.
struct HogwildFigures {
  double loss = 0.0;
  double accuracy = 0.0;
};

class HogwildEngine {
 public:
  // `threads` >= 1 lock-free threads over `data` (which must be what load_hogwild_data returned
  // for this config). ConfigError for an MLP with a loss other than cross entropy.
  HogwildEngine(const Config& config, const HogwildData& data, int threads);
  ~HogwildEngine();
  HogwildEngine(const HogwildEngine&) = delete;
  HogwildEngine& operator=(const HogwildEngine&) = delete;

  // From position `start` of the epoch's order, pausing as `pause` asks (parallel/hogwild.h).
  parallel::HogwildEpoch run_epoch(std::int64_t epoch, float lr, std::int64_t start = 0,
                                   const parallel::HogwildPause* pause = nullptr);
  HogwildFigures evaluate_train() const;
  // Empty when there is no test set.
  std::optional<HogwildFigures> evaluate_test() const;

  // The shared parameters (after run_epoch returned: every thread joined; or inside a pause's
  // at_pause, every thread waiting) and their tensors, for checkpoints: the MLP's layers, or one
  // tensor "weights" of the linear model's d features.
  std::span<float> weights();
  std::vector<nn::ParamEntry> param_entries() const;

  const std::string& dataset_name() const { return dataset_name_; }
  std::int64_t parameters() const { return parameters_; }
  // Engine-specific keys for summary.json's "parallel" (loss, l2, features, ... or batch size).
  const nlohmann::json& details() const { return details_; }
  // "N train / M test samples, ..." for the run banner.
  const std::string& description() const { return description_; }

 private:
  const HogwildData& data_;
  std::unique_ptr<parallel::Hogwild> linear_;
  std::unique_ptr<parallel::HogwildDense> dense_;
  std::string dataset_name_;
  std::int64_t parameters_ = 0;
  nlohmann::json details_;
  std::string description_;
};

}  // namespace dtrain::train
