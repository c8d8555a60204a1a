#include "dtrain/train/strategies/hybrid/hybrid_strategy.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/nn/tensor_parallel_cost.h"
#include "dtrain/train/strategies/pipeline/pipeline_strategy.h"
#include "dtrain/train/strategies/single_worker.h"
#include "dtrain/train/strategies/spatial/spatial_strategy.h"
#include "dtrain/train/strategies/tensor_parallel/tensor_parallel_strategy.h"

namespace dtrain::train {

namespace {

parallel::GridShape grid_shape(const Config& config) {
  const HybridSection& h = config.hybrid;
  parallel::GridShape shape;
  shape.dp = static_cast<int>(h.dp);
  shape.tp = static_cast<int>(h.tp);
  shape.pp = static_cast<int>(h.pp);
  shape.sp = static_cast<int>(h.sp);
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

// The shape of layer `layers`' input for `batch` samples (the output of layers [0, layers)).
tensor::Shape shape_after(const nn::Model& model, std::size_t layers, std::int64_t batch) {
  tensor::Shape shape{batch};
  shape.insert(shape.end(), model.sample_shape().begin(), model.sample_shape().end());
  for (std::size_t i = 0; i < layers; ++i) shape = model.layers()[i]->output_shape(shape);
  return shape;
}

// Elements of layer `layers`' input for `batch` samples.
std::int64_t numel_after(const nn::Model& model, std::size_t layers, std::int64_t batch) {
  return tensor::shape_numel(shape_after(model, layers, batch));
}

}  // namespace

Hybrid::Hybrid(const StrategyContext& context) : Strategy(context) {
  comm::Communicator& world = required_communicator(context, "hybrid");
  const parallel::GridShape shape = grid_shape(context.config);
  const bool zero1 = context.config.data_parallel.zero_stage == "1";
  if (zero1 && !optim::updates_in_parts(context.config.optim.name)) {
    throw ConfigError(fmt::format(
        "data_parallel.zero_stage = 1 with optim.name = \"{}\": a ZeRO-1 block may cut a tensor, "
        "and this rule needs whole tensors; use sgd, adam or adamw",
        context.config.optim.name));
  }
  if (shape.sp > 1 && (shape.tp > 1 || shape.pp > 1)) {
    // Before the grid's splits, so every rank fails alike before any traffic.
    throw ConfigError(fmt::format(
        "hybrid.sp = {} with hybrid.tp = {} and hybrid.pp = {}: the spatial split runs on the "
        "grid with data parallelism only (dp x sp); set tp = pp = 1 (--dp D --sp S)",
        shape.sp, shape.tp, shape.pp));
  }
  grid_ = std::make_unique<parallel::ProcessGrid>(world, shape);
  comm::Communicator& group = model_group();
  // The inner strategy sees its group as its world.
  StrategyContext inner{context.config, context.model, group.size() > 1 ? &group : nullptr,
                        group.rank(),   group.size(),  context.trace,
                        context.local};
  nn::Model* model = &context_.model;
  if (shape.pp > 1 && shape.tp > 1) {
    // A pipeline of tensor-parallel stages: the tensor split over the tensor group, then the
    // pipeline over the pipeline group, cutting the split model.
    comm::Communicator& tensor_group = grid_->tensor();
    StrategyContext split{context.config,      context.model, &tensor_group, tensor_group.rank(),
                          tensor_group.size(), context.trace, context.local};
    stage_split_ = std::make_unique<TensorParallel>(split);
    tensor_ = stage_split_.get();
    model = &tensor_->split_model();
    StrategyContext stages{context.config, *model,        &group,       group.rank(),
                           group.size(),   context.trace, context.local};
    // A balanced cut from every rank's timings: the T x D pipelines cut alike, so the tensor
    // group's collectives and the data group's sums meet stage by stage.
    auto pipeline = std::make_unique<Pipeline>(stages, &world);
    pipeline->set_data_replica(grid_->coords().dp, shape.dp);
    pipeline_ = pipeline.get();
    inner_ = std::move(pipeline);
  } else if (shape.pp > 1) {
    auto pipeline = std::make_unique<Pipeline>(inner, &world);
    pipeline->set_data_replica(grid_->coords().dp, shape.dp);
    pipeline_ = pipeline.get();
    inner_ = std::move(pipeline);
  } else if (shape.sp > 1) {
    // Spatial parallelism over the spatial group (ConfigError naming the numbers when the model
    // does not split over S ranks); the data group sums its whole (replicated) gradients.
    auto spatial = std::make_unique<Spatial>(inner);
    spatial->set_data_replica(grid_->coords().dp, shape.dp);
    spatial_ = spatial.get();
    model = &spatial->split_model();
    inner_ = std::move(spatial);
  } else if (shape.tp > 1) {
    auto tensor = std::make_unique<TensorParallel>(inner);
    // Replica d draws the dropout masks of data-parallel rank d of D, not replica 0's.
    tensor->set_data_replica(grid_->coords().dp, shape.dp);
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
  trained_ = model;
  axis_ = std::make_unique<DataAxis>(grid_->data(), *model, inner_->optimizer_segments(), options,
                                     zero1);
}

Hybrid::~Hybrid() = default;

comm::Communicator& Hybrid::model_group() {
  if (grid_->shape().sp > 1) return grid_->spatial();
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

double Hybrid::predicted_stage_tensor_bytes(std::int64_t samples) const {
  const nn::Model& model = tensor_->split_model();
  const int s = grid_->coords().pp;
  const nn::LayerRange range = pipeline_->stages()[static_cast<std::size_t>(s)];
  const std::int64_t m = context_.config.pipeline.micro_batches;
  // As Model::backward_range: the first stage computes no input gradient below its first layer
  // with parameters; the others send theirs on.
  const bool stage_input_grad = s > 0;
  const std::size_t lowest =
      stage_input_grad ? range.begin : std::max(range.begin, model.first_trainable());
  double bytes = 0.0;
  for (std::int64_t k = 0; k < m; ++k) {
    const std::int64_t size = samples * (k + 1) / m - samples * k / m;
    for (std::size_t i = range.begin; i < range.end; ++i) {
      const bool input_grad = i > lowest || stage_input_grad;
      // nn/tensor_parallel_cost.h: the split layers' allreduces and all-gathers.
      bytes += nn::tensor_parallel_layer_cost(*model.layers()[i], shape_after(model, i, size),
                                              input_grad, grid_->shape().tp)
                   .bytes;
    }
  }
  return bytes;
}

double Hybrid::predicted_model_bytes(std::int64_t samples) const {
  if (spatial_ != nullptr) return spatial_->predicted_step_bytes(samples).total();
  if (tensor_ != nullptr && pipeline_ == nullptr) return tensor_->predicted_step_bytes(samples);
  if (pipeline_ == nullptr) return 0.0;
  const Pipeline* pipeline = pipeline_;
  // The pipeline cuts the split model under tp x pp: its boundary activations are whole, the same
  // shapes as the unsplit model's.
  const nn::Model& model = tensor_ != nullptr ? tensor_->split_model() : context_.model;
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
  if (tensor_ != nullptr) bytes += predicted_stage_tensor_bytes(samples);
  return bytes;
}

StepResult Hybrid::step(const StepInput& input, optim::Optimizer& optimizer) {
  comm::Communicator& group = model_group();
  // tp x pp: the model group is both the pipeline and the tensor group.
  const bool both = stage_split_ != nullptr;
  const auto model_sent = [&] {
    return bytes_sent(group) + (both ? bytes_sent(grid_->tensor()) : 0.0);
  };
  const double model_before = model_sent();
  const double data_before = bytes_sent(grid_->data());
  StepResult result = inner_->step(input, view(optimizer));
  if (both) {
    tensor_->invalidate_whole_model();
    // Each of the replica's T pipelines reports the loss on its stage 0: tensor rank 0's counts.
    if (grid_->coords().tp != 0) {
      result.loss = 0.0f;
      result.correct = 0;
    }
  }
  model_bytes_ += model_sent() - model_before;
  data_bytes_ += bytes_sent(grid_->data()) - data_before;
  model_bytes_predicted_ += predicted_model_bytes(input.x.dim(0));
  data_bytes_predicted_ += predicted_data_bytes();
  ++steps_;
  // The inner strategy reports the loss on its group's rank 0 (one per replica), so the
  // Trainer's sums over all ranks count each sample once.
  return result;
}

void Hybrid::average_buffers() {
  comm::Communicator& data = grid_->data();
  nn::ParamStore& store = trained_->store();
  const std::int64_t n = store.num_buffer_elements();
  if (data.size() == 1 || n == 0) return;
  // Every rank averages its whole buffer array: the stage's own statistics, and the other stages'
  // copies, equal on every replica since the last gather and overwritten by the next.
  data.allreduce(store.buffers(), n, DType::kF32, comm::ReduceOp::kSum);
  const auto replicas = static_cast<float>(data.size());
  for (std::int64_t i = 0; i < n; ++i) store.buffers()[i] /= replicas;
}

void Hybrid::before_evaluation() {
  average_buffers();
  // tp x pp: the pipeline gathers its stages of the split model on every rank of each pipeline,
  // then the tensor group gathers the split tensors into the Trainer's model.
  inner_->before_evaluation();
  if (stage_split_) stage_split_->before_evaluation();
}
void Hybrid::after_evaluation() { inner_->after_evaluation(); }

std::vector<optim::StateTensor> Hybrid::checkpoint_state(const optim::Optimizer& optimizer) {
  // Every replica assembles the same; world rank 0 (rank 0 of replica 0's group) writes it.
  average_buffers();
  std::vector<optim::StateTensor> state =
      inner_->checkpoint_state(view(const_cast<optim::Optimizer&>(optimizer)));
  if (!stage_split_) return state;
  // tp x pp: stage 0 of each pipeline holds its tensor rank's state in the split model's layout;
  // the tensor group of stage 0 gathers it into one worker's. The other stages' tensor groups
  // only gather the parameters (their state is not written).
  if (grid_->coords().pp == 0) return stage_split_->gather_state(state);
  stage_split_->before_evaluation();
  return state;
}

void Hybrid::restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                           optim::Optimizer& optimizer, const std::string& path) {
  // tp x pp: one worker's layout -> this tensor rank's split layout -> this stage's part.
  if (stage_split_) state = stage_split_->slice_state(std::move(state), path);
  inner_->restore_state(std::move(state), optimizer_steps, view(optimizer), path);
}

std::vector<std::string> Hybrid::describe() const {
  std::vector<std::string> lines = grid_->describe();
  // tp x pp: the tensor split's line (its bytes are the whole model's; this rank's stage sends
  // its part, in the model-group figure below), then the pipeline's.
  if (stage_split_) {
    for (const std::string& line : stage_split_->describe()) lines.push_back(line);
  }
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
                        {"sp", c.sp},
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
            {"sp", shape.sp},
            {"order", parallel::grid_order_name(shape.order)},
            {"tensor_groups", grid_groups(shape, parallel::GridAxis::kTensor)},
            {"pipeline_groups", grid_groups(shape, parallel::GridAxis::kPipeline)},
            {"spatial_groups", grid_groups(shape, parallel::GridAxis::kSpatial)},
            {"data_groups", grid_groups(shape, parallel::GridAxis::kData)}}},
          {"zero_stage", axis_->zero1() ? 1 : 0},
          {"data_group_formula",
           "2 (D-1)/D x 4 N_stage (ring allreduce of the stage's or shard's "
           "gradients; ZeRO-1: reduce-scatter + allgather, the same)"},
          {"model_group_formula",
           shape.pp > 1 && shape.tp > 1
               ? "m x 4 (boundary activations forward + their gradients backward) + 16 (loss, "
                 "last stage) + 4 x tied weights, + the tensor split's collectives of this "
                 "stage's layers (docs/HYBRID.md)"
           : shape.pp > 1 ? "m x 4 (boundary activations forward + their gradients backward) + 16 "
                            "(loss, last stage) + 4 x tied weights"
           : shape.tp > 1 ? "the tensor split's allreduces (docs/TENSOR_PARALLEL.md)"
           : shape.sp > 1
               ? "the spatial split's (docs/SPATIAL.md) on the replica's share of B_d samples: "
                 "halo 4 B_d C W ([r>0] bottom + [r<S-1] top) per split convolution forward, "
                 "swapped backward + gather (S-1) x 4 B_d C' h' W' + allreduce ring(2F+1, 2F "
                 "doubles per batch norm) + ring(B_d C floats per global pool) + ring(split "
                 "parameters)"
               : "0"},
          {"per_grid_rank", per_rank},
          // tp x pp: the tensor split that the pipeline (inner) cuts into stages.
          {"tensor_split", stage_split_ ? nlohmann::json(stage_split_->describe()) : nullptr},
          {"inner", inner}};
}

}  // namespace dtrain::train
