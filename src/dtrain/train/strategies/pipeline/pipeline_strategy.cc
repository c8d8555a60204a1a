#include "dtrain/train/strategies/pipeline/pipeline_strategy.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <span>

#include "dtrain/base/error.h"
#include "dtrain/nn/loss.h"
#include "dtrain/nn/model_partition.h"
#include "dtrain/parallel/pipeline/deferred_batch_norm.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

namespace pp = parallel::pipeline;

namespace {

// Tags of the strategy's own messages (the executor's activations and gradients: executor.h).
constexpr std::uint64_t kTiedGradientTag = 0x5003;
constexpr std::uint64_t kTiedValueTag = 0x5004;
constexpr std::uint64_t kLossTag = 0x5005;
constexpr std::uint64_t kStateTag = 0x5006;

// The shape of layer `layers`' input (the output of layers [0, layers)) for `batch` samples.
tensor::Shape shape_after(const nn::Model& model, std::size_t layers, std::int64_t batch) {
  tensor::Shape shape{batch};
  shape.insert(shape.end(), model.sample_shape().begin(), model.sample_shape().end());
  for (std::size_t i = 0; i < layers; ++i) shape = model.layers()[i]->output_shape(shape);
  return shape;
}

int stage_of(const std::vector<nn::LayerRange>& stages, std::size_t layer) {
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (layer >= stages[s].begin && layer < stages[s].end) return static_cast<int>(s);
  }
  throw InternalError(fmt::format("layer {} is in no pipeline stage", layer));
}

std::string ranges_text(const std::vector<nn::LayerRange>& stages, const nn::Model& model) {
  std::string text;
  for (const auto& range : stages) {
    if (!text.empty()) text += " | ";
    text += fmt::format("{}..{}", model.layers()[range.begin]->name(),
                        model.layers()[range.end - 1]->name());
  }
  return text;
}

}  // namespace

// One stage's forward and backward of a micro-batch, with the loss on the last stage: what the
// executor calls. Micro-batch k of a step of B samples is [B k / m, B (k + 1) / m), as in
// LocalGradients, and draws dropout stream step m + k, as one worker with m accumulation steps.
class Pipeline::StageWork final : public pp::StageCompute {
 public:
  StageWork(const Config& config, nn::Model& model, LocalGradients& local, nn::LayerRange range,
            bool first, bool last, int micro_batches)
      : config_(config),
        model_(model),
        local_(local),
        range_(range),
        first_(first),
        last_(last),
        micro_batches_(micro_batches),
        dlogits_(static_cast<std::size_t>(model.slots())) {}

  void set_replica(int replica, int replicas) {
    replica_ = replica;
    replicas_ = replicas;
  }

  // PipeDream (pipeline.schedule = "pipedream"): each micro-batch's loss is its own mean (weight
  // 1), a forward stashes this stage's parameters [param_begin, param_end) when the backward may
  // come after an update (lag > 0), the backward runs with the stash, and optimizer_step() updates
  // the stage with that one micro-batch's gradient at the learning rate of its step.
  void set_pipedream(std::int64_t param_begin, std::int64_t param_end, int lag) {
    pipedream_ = true;
    param_begin_ = param_begin;
    param_end_ = param_end;
    lag_ = lag;
    const auto slots = static_cast<std::size_t>(model_.slots());
    stash_.resize(slots);
    stash_version_.assign(slots, 0);
    lr_.assign(slots, 0.0);
    first_input_.resize(slots);
  }
  void set_optimizer(optim::Optimizer& optimizer) { optimizer_ = &optimizer; }
  // PipeDream with a tied parameter (Pipeline::tie_hooks): around each backward (k: the list's
  // micro-batch number) and before each update.
  std::function<void()> before_backward;
  std::function<void(int)> after_backward;
  std::function<void(int)> before_update;
  // Updates applied on this stage since the run (or the resume) began: the newest weight version.
  std::int64_t version() const { return version_; }
  // Bytes of stashed weights this stage holds at most: one copy of its parameters per slot that
  // may wait across an update (none on the last stage).
  double stash_bytes() const {
    return lag_ > 0 ? static_cast<double>(param_end_ - param_begin_) * 4.0 *
                          static_cast<double>(model_.slots())
                    : 0.0;
  }

  void begin_step(const StepInput& input) {
    input_ = &input;
    batch_ = input.x.dim(0);
    per_sample_ = batch_ > 0 ? static_cast<std::int64_t>(input.labels.size()) / batch_ : 1;
    loss_sum_ = 0.0;
    correct_ = 0;
  }
  double loss_sum() const { return loss_sum_; }
  std::int64_t correct() const { return correct_; }

  tensor::Shape input_shape(int k) const override {
    return shape_after(model_, range_.begin, size(k));
  }
  tensor::Shape output_shape(int k) const override {
    return shape_after(model_, range_.end, size(k));
  }

  const tensor::Tensor& forward(int k, std::size_t slot, const tensor::Tensor* input) override {
    const std::int64_t begin = this->begin(k);
    const std::int64_t end = this->begin(k + 1);
    if (first_) micro_ = input_->x.slice(begin, end);
    if (pipedream_) {
      lr_[slot] = input_->lr;
      stash_version_[slot] = version_;
      if (lag_ > 0) {
        const float* params = model_.store().params();
        stash_[slot].assign(params + param_begin_, params + param_end_);
        // The first layer keeps a view of its input until the backward, which may come in the
        // next step, after the Trainer has refilled its batch: keep a copy per slot.
        if (first_) {
          tensor::Tensor& copy = first_input_[slot];
          copy.ensure_shape(micro_.shape());
          std::copy(micro_.data(), micro_.data() + micro_.numel(), copy.data());
          micro_ = copy;
        }
      }
    }
    // Replica d of D (the hybrid grid's data axis) draws as rank d of D data-parallel ranks
    // accumulating m micro-batches; alone (D = 1) as one worker accumulating m.
    const auto stream =
        static_cast<std::uint64_t>((input_->step * micro_batches_ + k) * replicas_ + replica_);
    const tensor::Tensor& out = model_.forward_range(
        first_ ? micro_ : *input,
        nn::ForwardContext{nn::Mode::kTrain, static_cast<std::uint64_t>(config_.train.seed),
                           static_cast<std::int64_t>(stream), slot},
        range_);
    if (last_) {
      const auto labels =
          input_->labels.subspan(static_cast<std::size_t>(begin * per_sample_),
                                 static_cast<std::size_t>((end - begin) * per_sample_));
      tensor::Tensor& dlogits = dlogits_[slot];
      const float value = local_.loss(out, labels, &dlogits);
      correct_ += nn::count_correct(out, labels);
      loss_sum_ += static_cast<double>(value) * static_cast<double>(end - begin);
      // The loss gradient weighted by |micro-batch| / B, exactly as LocalGradients does (PipeDream:
      // 1, each micro-batch is an update of its own).
      const float weight =
          pipedream_ ? 1.0f
                     : static_cast<float>(end - begin) / static_cast<float>(input_->global_count);
      if (weight != 1.0f) {
        float* d = dlogits.data();
        for (std::int64_t i = 0; i < dlogits.numel(); ++i) d[i] *= weight;
      }
    }
    return out;
  }

  const tensor::Tensor& backward(int k, std::size_t slot, const tensor::Tensor* grad) override {
    const tensor::Tensor& dy = last_ ? dlogits_[slot] : *grad;
    if (!pipedream_) return model_.backward_range(dy, range_, slot, /*input_grad=*/!first_);
    nn::ParamStore& store = model_.store();
    std::fill(store.grads() + param_begin_, store.grads() + param_end_, 0.0f);
    update_lr_ = lr_[slot];
    if (before_backward) before_backward();
    if (stash_version_[slot] == version_) {
      const tensor::Tensor& input_grad =
          model_.backward_range(dy, range_, slot, /*input_grad=*/!first_);
      if (after_backward) after_backward(k);
      return input_grad;
    }
    // Weight stashing: the backward sees the weights its forward saw; the newest come back after.
    float* params = store.params() + param_begin_;
    const auto n = static_cast<std::ptrdiff_t>(param_end_ - param_begin_);
    newest_.assign(params, params + n);
    std::copy(stash_[slot].begin(), stash_[slot].end(), params);
    const tensor::Tensor& input_grad =
        model_.backward_range(dy, range_, slot, /*input_grad=*/!first_);
    std::copy(newest_.begin(), newest_.end(), params);
    if (after_backward) after_backward(k);
    return input_grad;
  }

  void optimizer_step(int k) override {
    DTRAIN_CHECK(optimizer_ != nullptr, "pipedream optimizer step without an optimizer");
    if (before_update) before_update(k);
    nn::ParamStore& store = model_.store();
    optimizer_->step(store.params(), store.grads(), update_lr_);
    ++version_;
  }

 private:
  std::int64_t begin(int k) const { return batch_ * k / micro_batches_; }
  std::int64_t size(int k) const { return begin(k + 1) - begin(k); }

  const Config& config_;
  nn::Model& model_;
  LocalGradients& local_;
  nn::LayerRange range_;
  bool first_, last_;
  int micro_batches_;
  int replica_ = 0;   // this pipeline's index on the hybrid grid's data axis
  int replicas_ = 1;  // the data axis's size (1: no grid)
  const StepInput* input_ = nullptr;
  std::int64_t batch_ = 0;
  std::int64_t per_sample_ = 1;
  tensor::Tensor micro_;                 // first stage: view of the current micro-batch
  std::vector<tensor::Tensor> dlogits_;  // last stage: per slot, the weighted loss gradient
  double loss_sum_ = 0.0;
  std::int64_t correct_ = 0;
  // PipeDream.
  bool pipedream_ = false;
  std::int64_t param_begin_ = 0, param_end_ = 0;
  int lag_ = 0;                              // p - 1 - stage
  optim::Optimizer* optimizer_ = nullptr;    // the Trainer's, from the last step
  std::int64_t version_ = 0;                 // updates applied on this stage
  std::vector<std::vector<float>> stash_;    // per slot: the weights its forward used
  std::vector<std::int64_t> stash_version_;  // per slot: their version
  std::vector<double> lr_;                   // per slot: the learning rate of its step
  std::vector<tensor::Tensor> first_input_;  // first stage, per slot: its micro-batch
  std::vector<float> newest_;                // the newest weights during a stashed backward
  double update_lr_ = 0.0;                   // of the last backward
};

Pipeline::Pipeline(const StrategyContext& context, comm::Communicator* cut_group)
    : Strategy(context),
      comm_(required_communicator(context, "pipeline")),
      stage_(comm_.rank()),
      schedule_(pp::parse_schedule(context.config.pipeline.schedule, "pipeline.schedule")),
      micro_batches_(static_cast<int>(context.config.pipeline.micro_batches)),
      executor_(comm_) {
  nn::Model& model = context_.model;
  const int p = comm_.size();
  const std::size_t layers = model.layers().size();
  if (context_.config.pipeline.partition == "balanced") {
    // Every rank measures; the sum over the ranks that cut together is the same on each, and so
    // is the cut.
    const std::int64_t micro = std::max<std::int64_t>(
        1, context_.config.train.batch_size / context_.config.pipeline.micro_batches);
    nn::partition_by_count(layers, p);  // the layer-count error first, before measuring
    std::vector<double> costs =
        nn::measure_layer_costs(model, tensor::Tensor::zeros(shape_after(model, 0, micro)));
    comm::Communicator& agree = cut_group != nullptr ? *cut_group : comm_;
    agree.allreduce(costs.data(), static_cast<std::int64_t>(costs.size()), DType::kF64,
                    comm::ReduceOp::kSum);
    stages_ = nn::partition_balanced(costs, p);
  } else {
    stages_ = nn::partition_by_count(layers, p);
  }
  const nn::ParamStore& store = model.store();
  for (int s = 0; s < p; ++s) {
    const nn::LayerRange range = stages_[static_cast<std::size_t>(s)];
    std::int64_t lo = -1, hi = -1;
    for (std::size_t e = 0; e < store.param_entries().size(); ++e) {
      const std::size_t layer = model.param_layer()[e];
      if (layer < range.begin || layer >= range.end) continue;
      const auto& entry = store.param_entries()[e];
      if (lo < 0) lo = entry.offset;
      hi = entry.offset + entry.numel;
    }
    // A stage without parameters holds the empty range where the next stage's begin.
    if (lo < 0) lo = hi = s == 0 ? 0 : param_end_.back();
    param_begin_.push_back(lo);
    param_end_.push_back(hi);
    std::int64_t blo = -1, bhi = -1;
    for (const auto& entry : store.buffer_entries()) {
      for (std::size_t i = range.begin; i < range.end; ++i) {
        if (entry.name.rfind(model.layers()[i]->name() + ".", 0) == 0) {
          if (blo < 0) blo = entry.offset;
          bhi = entry.offset + entry.numel;
        }
      }
    }
    if (blo < 0) blo = bhi = s == 0 ? 0 : buffer_end_.back();
    buffer_begin_.push_back(blo);
    buffer_end_.push_back(bhi);
    // Parameters this stage's layers borrow from another stage (a tied output head).
    for (std::size_t i = range.begin; i < range.end; ++i) {
      for (const std::string& name : model.layers()[i]->borrowed_params()) {
        const int entry = store.find_param(name);
        const int owner = stage_of(stages_, model.param_layer()[static_cast<std::size_t>(entry)]);
        if (owner != s) ties_.push_back({entry, owner, s});
      }
    }
  }
  for (const Tie& tie : ties_) {
    // PipeDream keeps a tied parameter on the borrower at the owner's version of the last step's
    // end (tie_hooks), which needs the borrower to finish each micro-batch inside its step: the
    // last stage. Every rank has the same ties, so every rank refuses alike.
    if (schedule_ == pp::ScheduleKind::kPipeDream && (tie.user != p - 1 || tie.owner >= tie.user)) {
      throw ConfigError(fmt::format(
          "pipeline.schedule = \"pipedream\" cannot train '{}': it is owned by stage {} and read "
          "by stage {}, and only a parameter read again by the last stage is supported; use "
          "pipeline.schedule = \"1f1b\"",
          store.param_entries()[static_cast<std::size_t>(tie.entry)].name, tie.owner, tie.user));
    }
  }
  const nn::LayerRange mine = stages_[static_cast<std::size_t>(stage_)];
  if (context_.config.pipeline.deferred_batch_norm) {
    // Before reserve_slots: the slots' replicas copy the recorders.
    deferred_bn_ = std::make_unique<pp::DeferredBatchNorm>(model, mine);
  }
  actions_ = pp::make_schedule(schedule_, stage_, p, micro_batches_);
  // PipeDream's steady state holds p - stage micro-batches (the p - 1 - stage carried from the last
  // step and the one just forwarded), whatever m.
  if (schedule_ == pp::ScheduleKind::kPipeDream)
    pipedream_slots_ = static_cast<std::size_t>(p - stage_);
  model.reserve_slots(static_cast<std::size_t>(peak_slots()));
  work_ = std::make_unique<StageWork>(context_.config, model, context_.local, mine, stage_ == 0,
                                      stage_ + 1 == p, micro_batches_);
  if (schedule_ == pp::ScheduleKind::kPipeDream) {
    const auto i = static_cast<std::size_t>(stage_);
    work_->set_pipedream(param_begin_[i], param_end_[i], p - 1 - stage_);
    if (!ties_.empty()) tie_hooks();
  }
}

void Pipeline::tie_hooks() {
  nn::ParamStore& store = context_.model.store();
  const auto entry_of = [&store](const Tie& tie) -> const nn::ParamEntry& {
    return store.param_entries()[static_cast<std::size_t>(tie.entry)];
  };
  // The borrower (the last stage): its part of the tied gradient, alone, per micro-batch, to the
  // owner, posted before the micro-batch's input gradient goes back.
  work_->before_backward = [this, &store, entry_of] {
    for (const Tie& tie : ties_) {
      if (tie.user != stage_) continue;
      const auto& entry = entry_of(tie);
      std::fill_n(store.grads() + entry.offset, entry.numel, 0.0f);
    }
  };
  work_->after_backward = [this, &store, entry_of](int k) {
    for (const Tie& tie : ties_) {
      if (tie.user != stage_) continue;
      const auto& entry = entry_of(tie);
      TiedSend& send = tied_grad_sends_.emplace_back();
      send.number = pipedream_base_ + k;
      send.values.assign(store.grads() + entry.offset, store.grads() + entry.offset + entry.numel);
      send.message =
          comm_.isend(send.values.data(), entry.numel, DType::kF32, tie.owner, kTiedGradientTag);
    }
    note_tied_copies();
  };
  // The owner adds it to its own before the micro-batch's update.
  work_->before_update = [this, &store, entry_of](int /*k*/) {
    for (const Tie& tie : ties_) {
      if (tie.owner != stage_) continue;
      const auto& entry = entry_of(tie);
      tie_buffer_.resize(static_cast<std::size_t>(entry.numel));
      comm_.recv(tie_buffer_.data(), entry.numel, DType::kF32, tie.user, kTiedGradientTag);
      float* g = store.grads() + entry.offset;
      for (std::int64_t i = 0; i < entry.numel; ++i) {
        g[i] += tie_buffer_[static_cast<std::size_t>(i)];
      }
    }
    note_tied_copies();
  };
}

void Pipeline::note_tied_copies() {
  std::size_t floats = tie_buffer_.size();
  for (const TiedSend& send : tied_grad_sends_) floats += send.values.size();
  for (const TiedSend& send : tied_value_sends_) floats += send.values.size();
  peak_tied_copy_bytes_ = std::max(peak_tied_copy_bytes_, 4.0 * static_cast<double>(floats));
}

void Pipeline::sync_ties_after_call(bool drained) {
  if (ties_.empty() || schedule_ != pp::ScheduleKind::kPipeDream) return;
  nn::ParamStore& store = context_.model.store();
  const int p = comm_.size();
  // The owner sends the tied weight as it is now; the borrower takes it at the start of its next
  // call (or here, at a drain). Every rank counts the messages alike.
  ++tied_values_pending_;
  for (const Tie& tie : ties_) {
    const auto& entry = store.param_entries()[static_cast<std::size_t>(tie.entry)];
    if (tie.owner == stage_) {
      // The previous value was taken at the start of the borrower's call that this one needed.
      for (TiedSend& old : tied_value_sends_) old.message.wait();
      tied_value_sends_.clear();
      TiedSend& send = tied_value_sends_.emplace_back();
      send.values.assign(store.params() + entry.offset,
                         store.params() + entry.offset + entry.numel);
      send.message =
          comm_.isend(send.values.data(), entry.numel, DType::kF32, tie.user, kTiedValueTag);
    }
  }
  note_tied_copies();
  if (drained) {
    // The owner has received every gradient part in its drain; the borrower takes the values.
    for (TiedSend& send : tied_grad_sends_) send.message.wait();
    tied_grad_sends_.clear();
    receive_tied_values();
    for (TiedSend& send : tied_value_sends_) send.message.wait();
    tied_value_sends_.clear();
  }
  (void)p;
}

void Pipeline::receive_tied_values() {
  nn::ParamStore& store = context_.model.store();
  for (const Tie& tie : ties_) {
    if (tie.user != stage_) continue;
    const auto& entry = store.param_entries()[static_cast<std::size_t>(tie.entry)];
    for (int i = 0; i < tied_values_pending_; ++i) {
      comm_.recv(store.params() + entry.offset, entry.numel, DType::kF32, tie.owner, kTiedValueTag);
    }
  }
  tied_values_pending_ = 0;
}

Pipeline::~Pipeline() = default;

void Pipeline::set_data_replica(int replica, int replicas) {
  if (schedule_ == pp::ScheduleKind::kPipeDream && replicas > 1) {
    throw ConfigError(fmt::format(
        "pipeline.schedule = \"pipedream\" updates each stage after every micro-batch and cannot "
        "average {} data-parallel replicas' gradients; use hybrid.dp = 1 or another schedule",
        replicas));
  }
  work_->set_replica(replica, replicas);
}

int Pipeline::peak_slots() const {
  return schedule_ == pp::ScheduleKind::kPipeDream ? static_cast<int>(pipedream_slots_)
                                                   : pp::peak_in_flight(actions_);
}

void Pipeline::drain() {
  if (schedule_ != pp::ScheduleKind::kPipeDream) return;
  // Every stage calls this at the same point (collective); a stage with nothing in flight (the
  // last one always) runs an empty list, the others their pending backwards and updates, each
  // waiting for the gradients the next stage's drain sends.
  const std::vector<pp::Action> list = pp::pipedream_drain(stage_, comm_.size(), carried_);
  TraceRecorder& trace = context_.trace;
  std::function<void(const pp::ActionSpan&)> record;
  if (trace.enabled()) record = [&](const pp::ActionSpan& span) { trace_action(span, steps_); };
  const pp::StageStats stats = executor_.run_continued(list, 0, pipedream_slots_, *work_, record);
  carried_ = 0;
  sync_ties_after_call(/*drained=*/true);
  ++drains_;
  bytes_sent_ += stats.bytes_sent;
  bytes_received_ += stats.bytes_received;
}

void Pipeline::trace_action(const pp::ActionSpan& span, std::int64_t step) {
  const bool on_compute = span.action.kind != pp::ActionKind::kSendActivation &&
                          span.action.kind != pp::ActionKind::kSendGradient;
  context_.trace.add(pp::action_kind_name(span.action.kind), "pipeline",
                     on_compute ? TraceRecorder::kComputeThread : TraceRecorder::kCommThread,
                     span.start, span.end,
                     fmt::format(R"({{"step":{},"micro_batch":{},"slot":{},"stage":{}}})", step,
                                 span.action.micro_batch, span.slot, stage_));
}

double Pipeline::end_epoch() {
  drain();
  return 0.0;
}

std::vector<optim::Segment> Pipeline::optimizer_segments() const {
  const nn::Model& model = context_.model;
  const nn::LayerRange range = stages_[static_cast<std::size_t>(stage_)];
  std::vector<optim::Segment> segments;
  const auto& entries = model.store().param_entries();
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const std::size_t layer = model.param_layer()[e];
    if (layer < range.begin || layer >= range.end) continue;
    segments.push_back(
        {entries[e].name, entries[e].offset, entries[e].numel, entries[e].weight_decay});
  }
  return segments;
}

std::unique_ptr<data::SharePlan> Pipeline::share_plan(std::int64_t train_samples) const {
  // One worker's plan (every rank the whole batch), the last partial batch kept when it has at
  // least one sample per micro-batch.
  return std::make_unique<data::GlobalBatchPlan>(train_samples, context_.config.train.batch_size, 0,
                                                 1, context_.config.pipeline.micro_batches);
}

StepResult Pipeline::step(const StepInput& input, optim::Optimizer& optimizer) {
  using Clock = TraceRecorder::Clock;
  nn::ParamStore& store = context_.model.store();
  const int p = comm_.size();
  whole_model_current_ = false;
  const bool pipedream = schedule_ == pp::ScheduleKind::kPipeDream;
  if (!pipedream) store.zero_grads();  // PipeDream zeroes the stage's before each backward
  work_->begin_step(input);
  work_->set_optimizer(optimizer);
  if (deferred_bn_) deferred_bn_->begin();
  TraceRecorder& trace = context_.trace;
  std::function<void(const pp::ActionSpan&)> record;
  if (trace.enabled()) {
    record = [&](const pp::ActionSpan& span) { trace_action(span, input.step); };
  }
  pp::StageStats stats;
  if (pipedream) {
    // No flush: the backwards of up to p - 1 - stage micro-batches move to the next step (or the
    // next drain); every forward of this step's micro-batches runs in this call on every stage.
    if (!ties_.empty()) {
      // The borrower: the owner's tied weight as of its last call's end, and the gradient parts
      // the owner has surely taken (its updates through micro-batch base - p, done in its last
      // call, which needed nothing from this one).
      receive_tied_values();
      while (!tied_grad_sends_.empty() && tied_grad_sends_.front().number <= pipedream_base_ - p) {
        tied_grad_sends_.front().message.wait();
        tied_grad_sends_.pop_front();
      }
    }
    stats = executor_.run_continued(pp::pipedream_schedule(stage_, p, micro_batches_, carried_),
                                    micro_batches_, pipedream_slots_, *work_, record);
    carried_ = pp::pipedream_carried_after(stage_, p, micro_batches_, carried_);
    pipedream_base_ += micro_batches_;
    sync_ties_after_call(/*drained=*/false);
  } else {
    stats = executor_.run(actions_, micro_batches_, *work_, record);
  }
  // All of this step's forwards are done: one running-statistics update from all m micro-batches.
  if (deferred_bn_) deferred_bn_->end();
  const auto tail_start = Clock::now();
  // Tied parameters (flush schedules): the borrowing stage's gradient part goes to the owner, which
  // adds it (PipeDream: per micro-batch, tie_hooks()).
  std::vector<comm::PendingMessage> sends;
  for (const Tie& tie : pipedream ? std::vector<Tie>{} : ties_) {
    const auto& entry = store.param_entries()[static_cast<std::size_t>(tie.entry)];
    if (tie.user == stage_) {
      sends.push_back(comm_.isend(store.grads() + entry.offset, entry.numel, DType::kF32, tie.owner,
                                  kTiedGradientTag));
    } else if (tie.owner == stage_) {
      tie_buffer_.resize(static_cast<std::size_t>(entry.numel));
      comm_.recv(tie_buffer_.data(), entry.numel, DType::kF32, tie.user, kTiedGradientTag);
      float* g = store.grads() + entry.offset;
      for (std::int64_t i = 0; i < entry.numel; ++i)
        g[i] += tie_buffer_[static_cast<std::size_t>(i)];
    }
  }
  for (auto& send : sends) send.wait();
  sends.clear();
  const auto update_start = Clock::now();
  if (!pipedream) optimizer.step(store.params(), store.grads(), input.lr);
  const auto update_end = Clock::now();
  // ... and the owner's updated values go back to the borrowing stage.
  for (const Tie& tie : pipedream ? std::vector<Tie>{} : ties_) {
    const auto& entry = store.param_entries()[static_cast<std::size_t>(tie.entry)];
    if (tie.owner == stage_) {
      sends.push_back(comm_.isend(store.params() + entry.offset, entry.numel, DType::kF32, tie.user,
                                  kTiedValueTag));
    } else if (tie.user == stage_) {
      comm_.recv(store.params() + entry.offset, entry.numel, DType::kF32, tie.owner, kTiedValueTag);
    }
  }
  for (auto& send : sends) send.wait();
  // The step's loss, known on the last stage, for rank 0's progress, metrics and epoch sums.
  double loss_and_correct[2] = {work_->loss_sum(), static_cast<double>(work_->correct())};
  if (stage_ + 1 == p) {
    comm_.send(loss_and_correct, 2, DType::kF64, 0, kLossTag);
  } else if (stage_ == 0) {
    comm_.recv(loss_and_correct, 2, DType::kF64, p - 1, kLossTag);
  }
  if (trace.enabled() && !pipedream) {
    trace.add("optimizer", "compute", TraceRecorder::kComputeThread, update_start, update_end,
              fmt::format(R"({{"step":{}}})", input.step));
  }
  ++steps_;
  if (steps_ > 1) {
    ++measured_steps_;
    step_seconds_ += stats.seconds;
    compute_seconds_ += stats.compute_seconds;
  }
  bytes_sent_ += stats.bytes_sent;
  bytes_received_ += stats.bytes_received;
  StepResult result;
  if (stage_ == 0) {
    const auto samples = static_cast<double>(std::max<std::int64_t>(input.x.dim(0), 1));
    result.loss = static_cast<float>(loss_and_correct[0] / samples);
    result.correct = static_cast<std::int64_t>(loss_and_correct[1]);
  }
  result.waiting =
      stats.waiting_seconds + std::chrono::duration<double>(update_start - tail_start).count();
  result.comm = result.waiting;
  return result;
}

void Pipeline::gather_whole_model() {
  if (whole_model_current_) return;
  nn::ParamStore& store = context_.model.store();
  for (int s = 0; s < comm_.size(); ++s) {
    const auto i = static_cast<std::size_t>(s);
    if (param_end_[i] > param_begin_[i]) {
      comm_.broadcast(store.params() + param_begin_[i], param_end_[i] - param_begin_[i],
                      DType::kF32, s);
    }
    if (buffer_end_[i] > buffer_begin_[i]) {
      comm_.broadcast(store.buffers() + buffer_begin_[i], buffer_end_[i] - buffer_begin_[i],
                      DType::kF32, s);
    }
  }
  whole_model_current_ = true;
}

void Pipeline::before_evaluation() {
  drain();
  gather_whole_model();
}

std::vector<optim::StateTensor> Pipeline::checkpoint_state(const optim::Optimizer& optimizer) {
  drain();               // PipeDream: every micro-batch so far applied, nothing in flight
  gather_whole_model();  // rank 0 writes the whole model's parameters next
  std::vector<optim::StateTensor> mine = optimizer.state();
  const auto has_params = [&](int s) {
    return param_end_[static_cast<std::size_t>(s)] > param_begin_[static_cast<std::size_t>(s)];
  };
  if (stage_ != 0) {
    // A stage without parameters has an optimizer without state (or with empty vectors).
    if (has_params(stage_)) {
      for (const auto& tensor : mine) {
        comm_.send(tensor.values.data(), static_cast<std::int64_t>(tensor.values.size()),
                   DType::kF32, 0, kStateTag);
      }
    }
    return mine;  // not written: rank 0 writes
  }
  // Rank 0: each state vector in one worker's layout, stage after stage (segments are in
  // parameter order and each stage's parameters are contiguous). The names are the optimizer's
  // (rank 0's own stage may have none: an optimizer over one probe parameter names them).
  const std::vector<optim::StateTensor> names =
      optim::make_optimizer(optimizer_config(context_.config.optim),
                            {optim::Segment{"probe", 0, 1, true}})
          ->state();
  std::vector<optim::StateTensor> whole;
  for (std::size_t t = 0; t < names.size(); ++t) {
    std::vector<float> values(static_cast<std::size_t>(context_.model.store().num_params()));
    if (has_params(0)) {
      std::copy(mine[t].values.begin(), mine[t].values.end(), values.begin() + param_begin_[0]);
    }
    for (int s = 1; s < comm_.size(); ++s) {
      const auto i = static_cast<std::size_t>(s);
      if (!has_params(s)) continue;
      comm_.recv(values.data() + param_begin_[i], param_end_[i] - param_begin_[i], DType::kF32, s,
                 kStateTag);
    }
    whole.push_back({names[t].name, std::move(values)});
  }
  return whole;
}

void Pipeline::restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                             optim::Optimizer& optimizer, const std::string& path) {
  const auto i = static_cast<std::size_t>(stage_);
  const std::int64_t n = context_.model.store().num_params();
  std::vector<optim::StateTensor> mine;
  // Only the tensors this stage's optimizer has (none for a stage without parameters under SGD
  // with momentum: its state is empty).
  if (optimizer.state().empty()) state.clear();
  for (auto& tensor : state) {
    // Every rank reads the same file and so fails alike.
    if (static_cast<std::int64_t>(tensor.values.size()) != n) {
      throw CheckpointError(fmt::format(
          "checkpoint {}: optimizer state '{}' holds {} values, the model has {} parameters "
          "(the pipeline stores one worker's layout)",
          path, tensor.name, tensor.values.size(), n));
    }
    mine.push_back({tensor.name, std::vector<float>(tensor.values.begin() + param_begin_[i],
                                                    tensor.values.begin() + param_end_[i])});
  }
  Strategy::restore_state(std::move(mine), optimizer_steps, optimizer, path);
}

std::vector<std::string> Pipeline::describe() const {
  const int p = comm_.size();
  std::vector<std::string> lines{fmt::format(
      "pipeline: {} stages ({} partition: {}), {} micro-batches per step, schedule {}: bubble "
      "{} = {:.1f}%, at most {} micro-batches of activations in flight on this rank",
      p, context_.config.pipeline.partition, ranges_text(stages_, context_.model), micro_batches_,
      pp::schedule_name(schedule_),
      schedule_ == pp::ScheduleKind::kPipeDream ? "(steady state, no flush)" : "(p-1)/(m+p-1)",
      100.0 * pp::schedule_bubble(schedule_, p, micro_batches_), peak_slots())};
  if (schedule_ == pp::ScheduleKind::kPipeDream) {
    lines.push_back(fmt::format(
        "pipedream: an optimizer step per micro-batch ({} per step, each at the step's learning "
        "rate on one micro-batch's mean gradient); stage s forwards and backwards micro-batch n "
        "with its weights after max(D, n - (p-1-s)) updates (D: micro-batches before the last "
        "drain); drained at each evaluation, checkpoint and epoch end",
        micro_batches_));
  }
  if (deferred_bn_) {
    lines.push_back(fmt::format(
        "deferred batch norm: {} batch norm layers on this stage update their running statistics "
        "once per step from all {} micro-batches",
        deferred_bn_->layers(), micro_batches_));
  }
  return lines;
}

nlohmann::json Pipeline::summary(const RunTotalsView& totals) {
  const int p = comm_.size();
  const nn::Model& model = context_.model;
  const nn::LayerRange range = stages_[static_cast<std::size_t>(stage_)];
  // The layers' outputs a slot holds for a micro-batch of ceil(B / m) samples (each layer's own
  // workspaces come on top), times the slots in use.
  const std::int64_t micro =
      (context_.config.train.batch_size + micro_batches_ - 1) / micro_batches_;
  double activation_bytes = 0.0;
  for (std::size_t i = range.begin; i < range.end; ++i) {
    activation_bytes +=
        static_cast<double>(tensor::shape_numel(shape_after(model, i + 1, micro))) * 4.0;
  }
  const int peak = peak_slots();
  constexpr int kFields = 9;
  std::vector<double> mine{step_seconds_,
                           compute_seconds_,
                           static_cast<double>(measured_steps_),
                           static_cast<double>(peak),
                           activation_bytes * peak,
                           static_cast<double>(bytes_sent_),
                           static_cast<double>(bytes_received_),
                           work_->stash_bytes(),
                           peak_tied_copy_bytes_};
  std::vector<double> all(static_cast<std::size_t>(kFields * p));
  comm_.allgather(mine.data(), all.data(), kFields, DType::kF64);
  nlohmann::json stages = nlohmann::json::array();
  double bubble_sum = 0.0;
  for (int s = 0; s < p; ++s) {
    const double* row = all.data() + static_cast<std::ptrdiff_t>(s) * kFields;
    const double bubble = row[0] > 0.0 ? 1.0 - row[1] / row[0] : 0.0;
    bubble_sum += bubble;
    const nn::LayerRange r = stages_[static_cast<std::size_t>(s)];
    stages.push_back({{"stage", s},
                      {"layers", ranges_text({r}, model)},
                      {"parameters", param_end_[static_cast<std::size_t>(s)] -
                                         param_begin_[static_cast<std::size_t>(s)]},
                      {"measured_steps", row[2]},
                      {"step_seconds_mean", row[2] > 0 ? row[0] / row[2] : 0.0},
                      {"compute_seconds_mean", row[2] > 0 ? row[1] / row[2] : 0.0},
                      {"bubble_measured", bubble},
                      {"peak_micro_batches_in_flight", row[3]},
                      {"peak_activation_bytes", row[4]},
                      {"bytes_sent", row[5]},
                      {"bytes_received", row[6]},
                      {"peak_stash_bytes", row[7]},
                      {"peak_tied_copy_bytes", row[8]}});
  }
  nlohmann::json ranks = totals.per_rank_rows();
  return {{"strategy", name()},
          {"ranks", p},
          {"transport", std::string(comm_.transport().name())},
          {"stages", p},
          {"micro_batches", micro_batches_},
          {"schedule", std::string(pp::schedule_name(schedule_))},
          {"partition", context_.config.pipeline.partition},
          {"bubble_formula", schedule_ == pp::ScheduleKind::kPipeDream
                                 ? "0 in the steady state (no flush; each drain costs one "
                                   "(p-1)/(m+p-1) flush)"
                                 : "(p-1)/(m+p-1)"},
          {"bubble_predicted", pp::schedule_bubble(schedule_, p, micro_batches_)},
          {"flush_bubble", pp::bubble_fraction(p, micro_batches_)},
          {"deferred_batch_norm", deferred_bn_ != nullptr},
          {"pipedream_drains", drains_},
          // Idle time of each stage during its step (from its first action to its last send
          // completed) / that step time, from the second step on; the mean over stages.
          {"bubble_measured", bubble_sum / p},
          {"activation_bytes_note",
           "peak_activation_bytes: the stage's layer outputs for one micro-batch of ceil(B/m) "
           "samples x the micro-batches in flight (layer workspaces not counted)"},
          {"per_stage", stages},
          {"per_rank", ranks}};
}

}  // namespace dtrain::train
