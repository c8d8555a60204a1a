#include "dtrain/train/strategies/hogwild/hogwild_engine.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/data/load.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

void check_hogwild_config(const Config& config) {
  if (config.optim.name != "sgd" || config.optim.momentum != 0.0) {
    throw ConfigError(fmt::format(
        "config keys 'optim.name' = \"{}\" and 'optim.momentum' = {}: parallel.strategy = "
        "\"hogwild\" runs plain SGD without momentum; set optim.name = \"sgd\" and optim.momentum "
        "= 0",
        config.optim.name, config.optim.momentum));
  }
}

optim::LrSchedule hogwild_epoch_schedule(const Config& config) {
  optim::ScheduleConfig schedule = schedule_config(config, 1);
  schedule.global_batch = schedule.base_batch;
  return optim::LrSchedule(schedule);
}

namespace {

// The sparse linear models train per sample on sparse data; every other model Hogwild! takes
// (config.cc: mlp, lenet5, image layer lists) is dense.
bool sparse_linear(const Config& config) {
  return config.model.name == "logistic" || config.model.name == "svm";
}

}  // namespace

HogwildData load_hogwild_data(const Config& config) {
  HogwildData out;
  if (!sparse_linear(config)) {
    out.dense = load_run_data(config.data);
    return out;
  }
  data::SparseSplits sparse = data::load_sparse(data_spec(config.data));
  out.sparse_train = std::move(sparse.train);
  out.sparse_test = std::move(sparse.test);
  return out;
}

HogwildEngine::HogwildEngine(const Config& config, const HogwildData& data, int threads)
    : data_(data) {
  const TrainSection& t = config.train;
  if (sparse_linear(config)) {
    DTRAIN_CHECK(data.sparse_train.has_value(), "Hogwild! {} without sparse data",
                 config.model.name);
    const data::SparseDataset& train = *data.sparse_train;
    parallel::HogwildOptions options;
    options.loss = parallel::linear_loss_from_name(config.model.name);
    options.threads = threads;
    options.l2 = static_cast<float>(config.optim.weight_decay);
    options.seed = static_cast<std::uint64_t>(t.seed);
    linear_ = std::make_unique<parallel::Hogwild>(train, options);
    dataset_name_ = train.name;
    parameters_ = train.num_features;
    details_ = {{"loss", parallel::linear_loss_name(options.loss)},
                {"l2", config.optim.weight_decay},
                {"features", train.num_features},
                {"nonzeros", train.nnz()}};
    const std::int64_t test_size = data.sparse_test ? data.sparse_test->size() : 0;
    description_ = fmt::format("{} train / {} test samples, {:.1f} non-zeros per sample",
                               train.size(), test_size,
                               static_cast<double>(train.nnz()) /
                                   static_cast<double>(std::max<std::int64_t>(1, train.size())));
    return;
  }
  if (t.loss != "cross_entropy") {
    throw ConfigError(fmt::format(
        "config key 'train.loss' = \"{}\": a dense hogwild model trains with \"cross_entropy\" "
        "only",
        t.loss));
  }
  DTRAIN_CHECK(data.dense.has_value(), "Hogwild! {} without dense data", config.model.name);
  const RunData& dense = *data.dense;
  parallel::HogwildDenseOptions options;
  options.threads = threads;
  options.batch_size = t.batch_size;
  options.weight_decay = static_cast<float>(config.optim.weight_decay);
  options.seed = static_cast<std::uint64_t>(t.seed);
  dense_ = std::make_unique<parallel::HogwildDense>(
      model_spec(config.model, dense.train.sample_shape(), dense.train.num_classes), dense.train,
      options);
  dataset_name_ = dense.train.name;
  parameters_ = dense_->num_params();
  details_ = {{"batch_size_per_thread_step", t.batch_size},
              {"weight_decay", config.optim.weight_decay}};
  description_ = fmt::format("{} train / {} test samples, batches of {} per thread step",
                             dense.train.size(), dense.test.size(), t.batch_size);
}

HogwildEngine::~HogwildEngine() = default;

parallel::HogwildEpoch HogwildEngine::run_epoch(std::int64_t epoch, float lr, std::int64_t start,
                                                const parallel::HogwildPause* pause) {
  return linear_ ? linear_->run_epoch(epoch, lr, start, pause)
                 : dense_->run_epoch(epoch, lr, start, pause);
}

std::span<float> HogwildEngine::weights() {
  return linear_ ? linear_->weights() : dense_->weights();
}

std::vector<nn::ParamEntry> HogwildEngine::param_entries() const {
  if (dense_) return dense_->param_entries();
  const auto d = static_cast<std::int64_t>(linear_->weights().size());
  return {nn::ParamEntry{"weights", 0, {d}, d, true}};
}

HogwildFigures HogwildEngine::evaluate_train() const {
  if (linear_) {
    const parallel::LinearEvaluation e = linear_->evaluate(*data_.sparse_train);
    return {e.loss, e.accuracy};
  }
  const parallel::DenseEvaluation e = dense_->evaluate(data_.dense->train);
  return {e.loss, e.accuracy};
}

std::optional<HogwildFigures> HogwildEngine::evaluate_test() const {
  if (linear_) {
    if (!data_.sparse_test || data_.sparse_test->size() == 0) return std::nullopt;
    const parallel::LinearEvaluation e = linear_->evaluate(*data_.sparse_test);
    return HogwildFigures{e.loss, e.accuracy};
  }
  if (data_.dense->test.size() == 0) return std::nullopt;
  const parallel::DenseEvaluation e = dense_->evaluate(data_.dense->test);
  return HogwildFigures{e.loss, e.accuracy};
}

}  // namespace dtrain::train
