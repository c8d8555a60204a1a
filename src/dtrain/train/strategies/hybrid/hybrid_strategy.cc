#include "dtrain/train/strategies/hybrid/hybrid_strategy.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/train/strategies/pipeline/pipeline_strategy.h"
#include "dtrain/train/strategies/single_worker.h"
#include "dtrain/train/strategies/tensor_parallel/tensor_parallel_strategy.h"

namespace dtrain::train {

namespace {

parallel::GridShape grid_shape(const Config& config) {
  const HybridSection& h = config.hybrid;
  parallel::GridShape shape;
  shape.dp = static_cast<int>(h.dp);
  shape.tp = static_cast<int>(h.tp);
  shape.pp = static_cast<int>(h.pp);
  shape.order = parallel::parse_grid_order(h.order, "hybrid.order");
  return shape;
}

// Bytes sent by this communicator's rank so far: every operation but the argument checks and
// probes, which carry no training data.
double bytes_sent(comm::Communicator& comm) {
  double sum = 0.0;
  for (const auto& [op, stats] : comm.stats().snapshot()) {
    if (op == "header_check" || op == "alpha_beta_probe" || op == "split") continue;
    sum += static_cast<double>(stats.bytes_sent);
  }
  return sum;
}

// Elements of layer `layers`' input for `batch` samples (the output of layers [0, layers)).
std::int64_t numel_after(const nn::Model& model, std::size_t layers, std::int64_t batch) {
  tensor::Shape shape{batch};
  shape.insert(shape.end(), model.sample_shape().begin(), model.sample_shape().end());
  for (std::size_t i = 0; i < layers; ++i) shape = model.layers()[i]->output_shape(shape);
  return tensor::shape_numel(shape);
}

}  // namespace

Hybrid::Hybrid(const StrategyContext& context) : Strategy(context) {
  comm::Communicator& world = required_communicator(context, "hybrid");
  const parallel::GridShape shape = grid_shape(context.config);
  if (shape.tp > 1 && shape.pp > 1) {
    throw ConfigError(fmt::format(
        "hybrid.tp = {} with hybrid.pp = {}: a pipeline of tensor-parallel stages is not built "
        "yet; combine data parallelism with one of them (--dp D --pp P, or --dp D --tp T)",
        shape.tp, shape.pp));
  }
  const bool zero1 = context.config.data_parallel.zero_stage == "1";
  if (zero1 && !optim::updates_in_parts(context.config.optim.name)) {
    throw ConfigError(fmt::format(
        "data_parallel.zero_stage = 1 with optim.name = \"{}\": a ZeRO-1 block may cut a tensor, "
        "and this rule needs whole tensors; use sgd, adam or adamw",
        context.config.optim.name));
  }
  grid_ = std::make_unique<parallel::ProcessGrid>(world, shape);
  comm::Communicator& group = model_group();
  // The inner strategy sees its group as its world.
  StrategyContext inner{context.config, context.model, group.size() > 1 ? &group : nullptr,
                        group.rank(),   group.size(),  context.trace,
                        context.local};
  nn::Model* model = &context_.model;
  if (shape.pp > 1) {
    auto pipeline = std::make_unique<Pipeline>(inner);
    pipeline->set_data_replica(grid_->coords().dp, shape.dp);
    inner_ = std::move(pipeline);
  } else if (shape.tp > 1) {
    auto tensor = std::make_unique<TensorParallel>(inner);
    tensor_ = tensor.get();
    model = &tensor->split_model();
    inner_ = std::move(tensor);
  } else {
    inner_ = std::make_unique<SingleWorker>(inner);
  }
  comm::CollectiveOptions options;
  // The formula is the ring's; auto would pick by size and make it another.
  options.algorithm =
      context.config.parallel.allreduce == "auto" ? "ring" : context.config.parallel.allreduce;
  axis_ = std::make_unique<DataAxis>(grid_->data(), *model, inner_->optimizer_segments(), options,
                                     zero1);
}

Hybrid::~Hybrid() = default;

comm::Communicator& Hybrid::model_group() {
  return grid_->shape().pp > 1 ? grid_->pipeline() : grid_->tensor();
}

std::vector<optim::Segment> Hybrid::optimizer_segments() const { return axis_->update_segments(); }

std::unique_ptr<data::SharePlan> Hybrid::share_plan(std::int64_t train_samples) const {
  const Config& config = context_.config;
  const std::int64_t parts =
      grid_->shape().pp > 1 ? config.pipeline.micro_batches : config.train.accumulate_steps;
  return std::make_unique<data::GlobalBatchPlan>(train_samples, config.train.batch_size,
                                                 grid_->coords().dp, grid_->shape().dp, parts);
}

DataAxisOptimizer& Hybrid::view(optim::Optimizer& optimizer) {
  if (!view_ || &view_->inner() != &optimizer) {
    view_ = std::make_unique<DataAxisOptimizer>(*axis_, optimizer);
  }
  return *view_;
}

double Hybrid::predicted_model_bytes(std::int64_t samples) const {
  if (tensor_ != nullptr) return tensor_->predicted_step_bytes(samples);
  const auto* pipeline = dynamic_cast<const Pipeline*>(inner_.get());
  if (pipeline == nullptr) return 0.0;
  const nn::Model& model = context_.model;
  const int p = grid_->shape().pp;
  const int s = grid_->coords().pp;
  const auto& stages = pipeline->stages();
  const nn::LayerRange range = stages[static_cast<std::size_t>(s)];
  const std::int64_t m = context_.config.pipeline.micro_batches;
  double bytes = 0.0;
  for (std::int64_t k = 0; k < m; ++k) {
    const std::int64_t size = samples * (k + 1) / m - samples * k / m;
    if (s + 1 < p) bytes += 4.0 * static_cast<double>(numel_after(model, range.end, size));
    if (s > 0) bytes += 4.0 * static_cast<double>(numel_after(model, range.begin, size));
  }
  if (s + 1 == p) bytes += 16.0;  // the step's loss and correct count, 2 x f64, to stage 0
  // Tied weights (the GPT's head): the borrowing stage sends its gradient part, the owner the
  // updated values back.
  const nn::ParamStore& store = model.store();
  for (std::size_t layer = 0; layer < model.layers().size(); ++layer) {
    for (const std::string& name : model.layers()[layer]->borrowed_params()) {
      const int entry = store.find_param(name);
      const std::size_t owner_layer = model.param_layer()[static_cast<std::size_t>(entry)];
      int user = 0, owner = 0;
      for (int t = 0; t < p; ++t) {
        const nn::LayerRange r = stages[static_cast<std::size_t>(t)];
        if (layer >= r.begin && layer < r.end) user = t;
        if (owner_layer >= r.begin && owner_layer < r.end) owner = t;
      }
      if (user != owner && (s == user || s == owner)) {
        bytes +=
            4.0 * static_cast<double>(store.param_entries()[static_cast<std::size_t>(entry)].numel);
      }
    }
  }
  return bytes;
}

StepResult Hybrid::step(const StepInput& input, optim::Optimizer& optimizer) {
  comm::Communicator& group = model_group();
  const double model_before = bytes_sent(group);
  const double data_before = bytes_sent(grid_->data());
  StepResult result = inner_->step(input, view(optimizer));
  model_bytes_ += bytes_sent(group) - model_before;
  data_bytes_ += bytes_sent(grid_->data()) - data_before;
  model_bytes_predicted_ += predicted_model_bytes(input.x.dim(0));
  data_bytes_predicted_ += predicted_data_bytes();
  ++steps_;
  // The inner strategy reports the loss on its group's rank 0 (one per replica), so the
  // Trainer's sums over all ranks count each sample once.
  return result;
}

void Hybrid::before_evaluation() { inner_->before_evaluation(); }
void Hybrid::after_evaluation() { inner_->after_evaluation(); }

std::vector<optim::StateTensor> Hybrid::checkpoint_state(const optim::Optimizer& optimizer) {
  // Every replica assembles the same; world rank 0 (rank 0 of replica 0's group) writes it.
  return inner_->checkpoint_state(view(const_cast<optim::Optimizer&>(optimizer)));
}

void Hybrid::restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                           optim::Optimizer& optimizer, const std::string& path) {
  inner_->restore_state(std::move(state), optimizer_steps, view(optimizer), path);
}

std::vector<std::string> Hybrid::describe() const {
  std::vector<std::string> lines = grid_->describe();
  for (const std::string& line : inner_->describe()) lines.push_back(line);
  const std::int64_t share = context_.config.train.batch_size / grid_->shape().dp;
  lines.push_back(fmt::format(
      "hybrid: each of {} replicas takes {} of the {} samples of a step; the data group sums "
      "{} floats per rank{} before the update; bytes sent per rank and step: model group {:.0f} "
      "+ data group 2 (D-1)/D x 4 N_stage = {:.0f}",
      grid_->shape().dp, share, context_.config.train.batch_size, axis_->numel(),
      axis_->zero1() ? " (ZeRO-1: reduce-scatter, 1/D of the update, allgather)" : "",
      predicted_model_bytes(share), axis_->predicted_step_bytes()));
  return lines;
}

nlohmann::json Hybrid::summary(const RunTotalsView& totals) {
  nlohmann::json inner = inner_->summary(totals);
  comm::Communicator& world = grid_->world();
  const double steps = static_cast<double>(std::max<std::int64_t>(steps_, 1));
  constexpr int kFields = 4;
  const std::vector<double> mine{model_bytes_ / steps, model_bytes_predicted_ / steps,
                                 data_bytes_ / steps, data_bytes_predicted_ / steps};
  std::vector<double> all(static_cast<std::size_t>(kFields * world.size()));
  world.allgather(mine.data(), all.data(), kFields, DType::kF64);
  nlohmann::json per_rank = nlohmann::json::array();
  for (int r = 0; r < world.size(); ++r) {
    const double* row = all.data() + std::ptrdiff_t{r} * kFields;
    const parallel::GridCoords c = parallel::grid_coords(grid_->shape(), r);
    per_rank.push_back({{"rank", r},
                        {"dp", c.dp},
                        {"tp", c.tp},
                        {"pp", c.pp},
                        {"model_group_bytes_sent_per_step", row[0]},
                        {"model_group_bytes_predicted_per_step", row[1]},
                        {"data_group_bytes_sent_per_step", row[2]},
                        {"data_group_bytes_predicted_per_step", row[3]}});
  }
  const parallel::GridShape& shape = grid_->shape();
  if (world.rank() == 0) {
    log::info(
        "hybrid: bytes sent per step by rank 0: model group {:.0f} (formula {:.0f}), data "
        "group {:.0f} (formula 2 (D-1)/D x 4 N_stage = {:.0f})",
        mine[0], mine[1], mine[2], mine[3]);
  }
  return {{"strategy", name()},
          {"ranks", world.size()},
          {"transport", std::string(world.transport().name())},
          {"grid",
           {{"dp", shape.dp},
            {"tp", shape.tp},
            {"pp", shape.pp},
            {"order", parallel::grid_order_name(shape.order)},
            {"tensor_groups", grid_groups(shape, parallel::GridAxis::kTensor)},
            {"pipeline_groups", grid_groups(shape, parallel::GridAxis::kPipeline)},
            {"data_groups", grid_groups(shape, parallel::GridAxis::kData)}}},
          {"zero_stage", axis_->zero1() ? 1 : 0},
          {"data_group_formula",
           "2 (D-1)/D x 4 N_stage (ring allreduce of the stage's or shard's "
           "gradients; ZeRO-1: reduce-scatter + allgather, the same)"},
          {"model_group_formula",
           shape.pp > 1   ? "m x 4 (boundary activations forward + their gradients backward) + 16 "
                            "(loss, last stage) + 4 x tied weights"
           : shape.tp > 1 ? "the tensor split's allreduces (docs/TENSOR_PARALLEL.md)"
                          : "0"},
          {"per_grid_rank", per_rank},
          {"inner", inner}};
}

}  // namespace dtrain::train
