#include "dtrain/train/strategies/data_parallel/data_parallel_strategy.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <span>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/parallel/optimizer_shards.h"
#include "dtrain/parallel/rank_agreement.h"
#include "dtrain/parallel/reducers/allreduce_reducer.h"
#include "dtrain/parallel/reducers/compressed_reducer.h"
#include "dtrain/parallel/reducers/robust_reducer.h"
#include "dtrain/parallel/reducers/zero1_reducer.h"
#include "dtrain/train/strategies/per_rank_state.h"

namespace dtrain::train {

namespace {

// Bytes each rank sends per step for its gradient buckets, by the ring formulas of
// docs/COMPRESSION.md (allreduce 2 (P-1)/P x payload, allgather (P-1) x payload), and the formula
// in words for summary.json. Sharded (ZeRO-1) runs move the same bytes as a ring allreduce.
std::pair<double, std::string> predicted_bytes(const compress::CodecSpec& spec,
                                               const std::vector<parallel::GradientBucket>& buckets,
                                               const std::vector<nn::ParamEntry>& entries,
                                               int ranks) {
  const double p = ranks;
  const double allreduce = 2.0 * (p - 1.0) / p;
  const std::unique_ptr<compress::Codec> codec = compress::make_codec(spec);
  double bytes = 0.0;
  for (const parallel::GradientBucket& bucket : buckets) {
    const std::int64_t n = bucket.count;
    switch (spec.exchange()) {
      case compress::Exchange::kSummable:
        bytes += allreduce * static_cast<double>(codec ? codec->encoded_bytes(n) : 4 * n);
        break;
      case compress::Exchange::kGather:
        bytes += (p - 1.0) * static_cast<double>(codec->encoded_bytes(n));
        break;
      case compress::Exchange::kLowRank:
        // Per tensor (compressed_reducer.h): a matrix's factors where they are smaller.
        for (std::size_t e = bucket.first_entry; e < bucket.end_entry; ++e) {
          const nn::ParamEntry& entry = entries[e];
          const std::int64_t rows = entry.shape.size() >= 2 ? entry.shape[0] : 1;
          const std::int64_t cols = entry.numel / rows;
          const std::int64_t factors = spec.rank * (rows + cols);
          const bool pays = spec.rank <= std::min(rows, cols) && factors < entry.numel;
          bytes += allreduce * 4.0 * static_cast<double>(pays ? factors : entry.numel);
        }
        break;
    }
  }
  const char* formula = spec.kind == compress::CodecKind::kNone
                            ? "sum over buckets of 2 (P-1)/P x 4 n"
                        : spec.exchange() == compress::Exchange::kSummable
                            ? "sum over buckets of 2 (P-1)/P x encoded_bytes(n)"
                        : spec.exchange() == compress::Exchange::kGather
                            ? "sum over buckets of (P-1) x encoded_bytes(n)"
                            : "sum over tensors of 2 (P-1)/P x 4 r (rows + cols), 4 rows cols "
                              "where that is not smaller";
  return {bytes, formula};
}

}  // namespace

compress::CodecSpec codec_spec(const DataParallelSection& config) {
  compress::CodecSpec spec = compress::parse_codec(config.compression);
  if (config.error_feedback != "auto") spec.error_feedback = config.error_feedback == "true";
  return spec;
}

DataParallel::DataParallel(const StrategyContext& context)
    : Strategy(context), comm_(required_communicator(context, "data-parallel training")) {
  const Config& config = context.config;
  nn::Model& model = context.model;
  parallel::broadcast_parameters(comm_, model.store());
  parallel::DataParallelOptions dp;
  dp.algorithm = config.parallel.allreduce;
  overlap_ = decide_overlap(config.data_parallel.overlap,
                            overlap_inputs(static_cast<int>(config.parallel.workers),
                                           static_cast<int>(config.train.threads)));
  dp.overlap = overlap_.overlap;
  fusion_ = decide_fusion_bytes(config.data_parallel.bucket_bytes, overlap_.overlap,
                                model.store().num_params() * 4);
  const DataParallelSection& section = config.data_parallel;
  robust_ = parallel::needs_robust_reducer(section.aggregator, section.attack);
  if (robust_ && section.bucket_bytes == "auto") {
    // Krum's distances and centered clipping's norms are whole-vector: per bucket they would judge
    // each bucket alone (robust_reducer.h). Nothing is lost: the allgather cannot overlap much.
    fusion_ = {std::max<std::int64_t>(model.store().num_params() * 4, 1),
               "one bucket (auto: robust aggregation judges whole gradients)"};
  }
  dp.fusion_bytes = fusion_.bytes;
  dp.check_headers = config.parallel.check_headers;
  zero_ = decide_zero_stage(config.data_parallel.zero_stage, comm_.size(), config.optim.name,
                            config.parallel.allreduce, config.data_parallel.compression);
  if (robust_ && section.zero_stage == "auto") {
    zero_ = {false, "replicated (auto: robust aggregation needs every rank's whole gradient)"};
  }
  fused_ = decide_fused_update(
      config.data_parallel.sum_in_update,
      FusedUpdateInputs{zero_.shard, overlap_.overlap, comm_.shares_memory(), config.optim.name});
  // The bucket's exchange (parallel/gradient_reducer.h), chosen once from the decisions above.
  codec_ = codec_spec(config.data_parallel);
  if (fused_.fused) {
    dp.reducer = parallel::fused_zero1_reducer();
  } else if (zero_.shard) {
    dp.reducer = parallel::zero1_reducer();
  } else if (config.optim.name == "onebit_adam") {
    // Kept to checkpoint its per-rank errors (onebit_adam_reducer.h).
    dp.reducer = [this, factory = parallel::onebit_adam_reducer(config.optim.freeze_step)](
                     const parallel::ReducerContext& reducer_context) {
      std::unique_ptr<parallel::GradientReducer> reducer = factory(reducer_context);
      onebit_ = dynamic_cast<parallel::OneBitAdamReducer*>(reducer.get());
      return reducer;
    };
  } else if (codec_.kind != compress::CodecKind::kNone) {
    // Kept to checkpoint its per-rank state (error feedback's residual, seeds' steps, Q).
    dp.reducer = [this, factory = parallel::compressed_reducer(
                            codec_, static_cast<std::uint64_t>(config.train.seed),
                            config.data_parallel.compression_warmup_steps,
                            static_cast<float>(config.data_parallel.momentum_correction))](
                     const parallel::ReducerContext& reducer_context) {
      std::unique_ptr<parallel::GradientReducer> reducer = factory(reducer_context);
      compressed_ = dynamic_cast<parallel::CompressedReducer*>(reducer.get());
      return reducer;
    };
  } else if (robust_) {
    // Kept to checkpoint its per-rank state (worker momentum).
    dp.reducer = [this,
                  factory = parallel::robust_reducer(
                      {section.aggregator, section.attack, static_cast<int>(section.byzantine),
                       static_cast<std::uint64_t>(config.train.seed),
                       static_cast<float>(section.worker_momentum)})](
                     const parallel::ReducerContext& reducer_context) {
      std::unique_ptr<parallel::GradientReducer> reducer = factory(reducer_context);
      robust_reducer_ = dynamic_cast<parallel::RobustReducer*>(reducer.get());
      return reducer;
    };
  } else {
    dp.reducer = parallel::allreduce_reducer();
  }
  dp.stall_warning = std::chrono::milliseconds(
      static_cast<std::int64_t>(config.parallel.stall_warning_seconds * 1000.0));
  sync_ = std::make_unique<parallel::GradientSynchronizer>(comm_, model, dp);
  if (config.data_parallel.sync_batch_norm) bn_reducer_ = parallel::sync_batch_norm(model, comm_);
  flips_labels_ = section.attack == "labelflip" && comm_.rank() >= comm_.size() - section.byzantine;
  const tensor::Shape output = model.output_shape(1);
  classes_ = output.empty() ? 0 : output.back();
}

std::vector<optim::Segment> DataParallel::optimizer_segments() const {
  return sync_->update_segments();
}

StepResult DataParallel::step(const StepInput& input, optim::Optimizer& optimizer) {
  using Clock = TraceRecorder::Clock;
  TraceRecorder& trace = context_.trace;
  nn::ParamStore& store = context_.model.store();
  const std::int64_t step = input.step;
  sync_->begin_step();
  std::span<const std::int32_t> labels = input.labels;
  if (flips_labels_) {
    // Label flipping (docs/ROBUST.md): this rank trains on y -> C - 1 - y; negative labels
    // (positions without a target) stay.
    flipped_.assign(labels.begin(), labels.end());
    for (std::int32_t& y : flipped_) {
      if (y >= 0) y = static_cast<std::int32_t>(classes_ - 1 - y);
    }
    labels = flipped_;
  }
  const LocalGradients::Result local =
      context_.local.compute(input.x, labels, step, input.global_count,
                             [this](std::size_t layer) { sync_->on_layer_done(layer); });
  StepResult result;
  result.loss = local.mean_loss();
  result.correct = local.correct;

  const auto wait_start = Clock::now();
  sync_->finish();
  result.waiting = sync_->wait_seconds();
  const auto& buckets = sync_->buckets();
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const auto& t = sync_->timings()[b];
    result.comm += std::chrono::duration<double>(t.finished - t.started).count();
    // A reducer without per-bucket exchanges (fused ZeRO-1): the barrier is the wait span below,
    // the sums the update's.
    if (trace.enabled() && sync_->reducer().per_bucket()) {
      trace.add(fmt::format("{} {}", sync_->gradient_collective(), buckets[b].name), "comm",
                TraceRecorder::kCommThread, t.started, t.finished,
                fmt::format(R"({{"step":{},"bucket":{},"bytes":{},"algorithm":"{}"}})", step, b,
                            buckets[b].count * 4, sync_->reducer().algorithm()));
    }
  }
  if (trace.enabled()) {
    trace.add("wait for gradients", "wait", TraceRecorder::kComputeThread, wait_start, Clock::now(),
              fmt::format(R"({{"step":{}}})", step));
  }
  const auto update_start = Clock::now();
  sync_->update(optimizer, input.lr);
  const auto update_end = Clock::now();
  if (trace.enabled()) {
    trace.add(fused()     ? "fused reduce + update (shard)"
              : sharded() ? "optimizer (shard)"
                          : "optimizer",
              "compute", TraceRecorder::kComputeThread, update_start, update_end,
              fmt::format(R"({{"step":{}}})", step));
  }
  if (onebit_ != nullptr) {
    // 1-bit Adam after the freeze: the momentum's compressed allreduce runs inside the update.
    const auto [exchange_start, exchange_end] = onebit_->last_exchange();
    if (exchange_end > exchange_start) {
      const double seconds = std::chrono::duration<double>(exchange_end - exchange_start).count();
      result.comm += seconds;
      result.waiting += seconds;
      if (trace.enabled()) {
        trace.add("1-bit momentum exchange", "comm", TraceRecorder::kComputeThread, exchange_start,
                  exchange_end, fmt::format(R"({{"step":{}}})", step));
      }
    }
  }
  if (sharded()) {
    // ZeRO-1: every rank updated its shard; the allgather hands the new parameters to all.
    const auto [gather_start, gather_end] = sync_->gather_parameters();
    const double seconds = std::chrono::duration<double>(gather_end - gather_start).count();
    result.comm += seconds;
    result.waiting += seconds;
    if (trace.enabled()) {
      trace.add("allgather parameters", "comm", TraceRecorder::kComputeThread, gather_start,
                gather_end,
                fmt::format(R"({{"step":{},"bytes":{}}})", step, store.num_params() * 4));
    }
  }
  return result;
}

std::vector<optim::StateTensor> DataParallel::checkpoint_state(const optim::Optimizer& optimizer) {
  std::vector<optim::StateTensor> state = optimizer.state();
  if (onebit_ != nullptr) {
    // 1-bit Adam's error feedback is each rank's own, as a residual is.
    for (optim::StateTensor& tensor : gather_per_rank(comm_, onebit_->state(), true)) {
      state.push_back(std::move(tensor));
    }
  }
  if (compressed_ != nullptr) {
    // Each rank's residual is its own: every rank's, under "rank<r>/", gathered at rank 0, which
    // writes checkpoints ((P-1) x the state's bytes into rank 0; compression and robust runs never
    // shard, so no rank uses the state below).
    for (optim::StateTensor& tensor : gather_per_rank(comm_, compressed_->state(), true)) {
      state.push_back(std::move(tensor));
    }
  }
  if (robust_reducer_ != nullptr) {
    // The aggregators' state (centered clipping's centre, bucketing's shuffle count) is the same
    // on every rank; rank 0's is the one written.
    state.push_back({"robust/aggregator_state", robust_reducer_->aggregator_state()});
  }
  if (robust_reducer_ != nullptr && !robust_reducer_->momentum().empty()) {
    // Each rank's worker momentum is its own, as a residual is.
    const std::vector<optim::StateTensor> mine = {
        {"robust/worker_momentum", robust_reducer_->momentum()}};
    for (optim::StateTensor& tensor : gather_per_rank(comm_, mine, true)) {
      state.push_back(std::move(tensor));
    }
  }
  if (!sharded()) return state;
  // Each rank holds its shard's state; the sum of the zero-filled expansions is the whole (every
  // element is non-zero on one rank at most), the same layout as an unsharded run's.
  for (optim::StateTensor& tensor : state) {
    tensor.values = parallel::expand_state(optimizer.segments(), tensor.values,
                                           context_.model.store().num_params());
    comm_.allreduce(tensor.values.data(), static_cast<std::int64_t>(tensor.values.size()),
                    DType::kF32, comm::ReduceOp::kSum);
  }
  return state;
}

void DataParallel::restore_state(std::vector<optim::StateTensor> state,
                                 std::int64_t optimizer_steps, optim::Optimizer& optimizer,
                                 const std::string& path) {
  restore_aggregator_state(state, path);
  restore_compression_state(state, path);
  if (onebit_ != nullptr) onebit_->set_steps(optimizer_steps);
  if (sharded()) {
    // ZeRO-1: this rank's shard of the full state (a length mismatch is reported by load_state).
    for (optim::StateTensor& tensor : state) {
      if (std::ssize(tensor.values) == context_.model.store().num_params()) {
        tensor.values = parallel::pack_state(optimizer.segments(), tensor.values);
      }
    }
  }
  Strategy::restore_state(std::move(state), optimizer_steps, optimizer, path);
}

void DataParallel::restore_aggregator_state(std::vector<optim::StateTensor>& state,
                                            const std::string& path) {
  const auto found = std::find_if(state.begin(), state.end(), [](const auto& tensor) {
    return tensor.name == "robust/aggregator_state";
  });
  std::vector<float> values;
  if (found != state.end()) {
    values = std::move(found->values);
    state.erase(found);
  }
  if (robust_reducer_ == nullptr) return;
  if ((values.empty() || !robust_reducer_->load_aggregator_state(values)) && context_.rank == 0) {
    log::warn(
        "checkpoint {} holds no aggregator state for this run's buckets: centered clipping's "
        "centre and bucketing's shuffles start over",
        path);
  }
}

void DataParallel::restore_compression_state(std::vector<optim::StateTensor>& state,
                                             const std::string& path) {
  PerRankState split = split_per_rank(state, context_.rank);
  // The optimizer's tensors stay; every rank's compression tensors go.
  std::erase_if(state, [](const optim::StateTensor& tensor) {
    return tensor.name.rfind("rank", 0) == 0 &&
           (tensor.name.find("/compression/") != std::string::npos ||
            tensor.name.find("/robust/") != std::string::npos);
  });
  if (robust_reducer_ != nullptr && !robust_reducer_->momentum().empty()) {
    const auto found = std::find_if(split.mine.begin(), split.mine.end(), [](const auto& tensor) {
      return tensor.name == "robust/worker_momentum";
    });
    if (std::cmp_equal(split.writers, context_.world) && found != split.mine.end() &&
        found->values.size() == robust_reducer_->momentum().size()) {
      robust_reducer_->load_momentum(found->values);
    } else if (context_.rank == 0) {
      log::warn(
          "checkpoint {} holds no worker momentum for these {} ranks: it restarts at zero "
          "(a worker's momentum is its own)",
          path, context_.world);
    }
    return;
  }
  if (onebit_ != nullptr) {
    if (std::cmp_equal(split.writers, context_.world)) {
      onebit_->load_state(split.mine, path);
    } else if (context_.rank == 0) {
      log::warn(
          "checkpoint {} holds no 1-bit Adam error feedback for these {} ranks: it restarts at "
          "zero (each rank's is its own)",
          path, context_.world);
    }
    return;
  }
  if (compressed_ == nullptr) return;
  if (std::cmp_equal(split.writers, context_.world)) {
    compressed_->load_state(split.mine, path);
    return;
  }
  if (context_.rank == 0) {
    log::warn("{}",
              split.writers == 0
                  ? fmt::format("checkpoint {} holds no compression state ({}): error-feedback "
                                "residuals and codec seeds restart at zero",
                                path, codec_.text())
                  : fmt::format("checkpoint {} holds the compression state of {} ranks, this run "
                                "has {}: error-feedback residuals and codec seeds restart at zero "
                                "(a residual is its rank's own)",
                                path, split.writers, context_.world));
  }
}

std::vector<std::string> DataParallel::describe() const {
  const auto& p = context_.config.parallel;
  std::vector<std::string> lines = {
      fmt::format(
          "data parallel: {} ranks ({} per process), {}, {} gradient bucket(s): {}, overlap {}, "
          "batch norm {}",
          context_.world, p.workers,
          sharded() ? "optimizer " + zero_.reason +
                          (fused() ? " (ZeRO-1: update 1/P, allgather)"
                                   : " (ZeRO-1: ring reduce-scatter, update 1/P, allgather)") +
                          ", gradient sums " + fused_.reason
                    : "allreduce " + p.allreduce + ", optimizer " + zero_.reason,
          sync_->buckets().size(), fusion_.reason, overlap_.reason,
          context_.model.store().num_buffer_elements() == 0 ? "none in the model"
          : context_.config.data_parallel.sync_batch_norm   ? "synchronized"
                                                            : "per rank"),
      codec_.kind == compress::CodecKind::kNone
          ? std::string("gradients uncompressed (data_parallel.compression = none)")
          : fmt::format("gradients compressed: {} by {}, error feedback {}{} "
                        "(docs/COMPRESSION.md)",
                        codec_.text(), compress::exchange_name(codec_.exchange()),
                        codec_.error_feedback ? "on" : "off",
                        context_.config.data_parallel.momentum_correction > 0.0
                            ? fmt::format(", momentum correction {} ({})",
                                          context_.config.data_parallel.momentum_correction,
                                          codec_.kind == compress::CodecKind::kPowerSgd
                                              ? "DGC's, the subspace sent masked"
                                              : "DGC")
                            : std::string())};
  if (onebit_ != nullptr) {
    const std::int64_t n = context_.model.store().num_params();
    lines.push_back(fmt::format(
        "1-bit Adam: {} exact Adam steps (f32 allreduce, {} B per rank and step), then the "
        "variance frozen and the momentum in 1 bit with worker and server error feedback "
        "(alltoall + allgather, 2 (P-1) (4 + c/8) = {} B per rank and step; docs/COMPRESSION.md)",
        context_.config.optim.freeze_step,
        2 * (context_.world - 1) * 4 * n / std::max(context_.world, 1),
        parallel::OneBitAllreduce::bytes_sent(n, context_.world)));
  }
  const DataParallelSection& dp = context_.config.data_parallel;
  if (robust_ || dp.attack != "none") {
    const std::int64_t f = dp.byzantine;
    lines.push_back(fmt::format(
        "gradients aggregated: {} of the {} ranks' gradients{}, byzantine f = {}{} "
        "(docs/ROBUST.md)",
        dp.aggregator, context_.world,
        robust_ ? " (allgather, (P-1) x 4n bytes per rank and bucket)" : " (plain allreduce)", f,
        dp.attack == "none" ? std::string(", no attack")
        : f == 1            ? fmt::format(", attack {} by rank {}", dp.attack, context_.world - 1)
                 : fmt::format(", attack {} by ranks {}..{}", dp.attack, context_.world - f,
                               context_.world - 1)));
  }
  return lines;
}

nlohmann::json DataParallel::summary(const RunTotalsView& totals) {
  const auto& par = context_.config.parallel;
  const auto& dp = context_.config.data_parallel;
  nlohmann::json ranks = totals.per_rank_rows();
  double compute = 0.0, comm_seconds = 0.0, waiting = 0.0, sent = 0.0, received = 0.0;
  for (const auto& row : ranks) {
    compute += row["compute_seconds"].get<double>();
    comm_seconds += row["comm_seconds"].get<double>();
    waiting += row["wait_seconds"].get<double>();
    sent += row["bytes_sent"].get<double>();
    received += row["bytes_received"].get<double>();
  }
  const double p = static_cast<double>(context_.world);
  auto predicted = predicted_bytes(codec_, sync_->buckets(), context_.model.store().param_entries(),
                                   context_.world);
  if (robust_) {
    predicted = {0.0, "sum over buckets of (P-1) x 4 n (allgather of every rank's f32 gradient)"};
    for (const parallel::GradientBucket& bucket : sync_->buckets()) {
      predicted.first += (p - 1.0) * 4.0 * static_cast<double>(bucket.count);
    }
  } else if (fused()) {
    // The gradient sums are reads of the other ranks' buffers, not messages: only the parameter
    // allgather, (P-1)/P x 4 N.
    predicted = {predicted.first / 2.0,
                 "(P-1)/P x 4 N (the parameter allgather; the sums are "
                 "memory reads)"};
  } else if (sharded()) {
    predicted.second = "(P-1)/P x 4 N reduce-scatter + (P-1)/P x 4 N parameter allgather";
  } else if (onebit_ != nullptr && totals.steps > 0) {
    // W warm-up steps of the f32 allreduce, the others 1-bit (onebit_allreduce.h); of this
    // run's steps (after a resume: since it), those before step W.
    const auto steps = static_cast<double>(totals.steps);
    const auto first = static_cast<double>(onebit_->steps() - totals.steps);
    const double warm =
        std::clamp(static_cast<double>(context_.config.optim.freeze_step) - first, 0.0, steps);
    const auto frozen = static_cast<double>(
        parallel::OneBitAllreduce::bytes_sent(context_.model.store().num_params(), context_.world));
    predicted = {(warm * predicted.first + (steps - warm) * frozen) / steps,
                 "(W' x 2 (P-1)/P x 4 N + (steps - W') x 2 (P-1) (4 + c/8)) / steps, W' the "
                 "run's steps before step W, c = ceil(N/P) rounded up to 8 (1-bit Adam)"};
  }
  return {{"strategy", name()},
          {"ranks", context_.world},
          {"workers_per_process", par.workers},
          {"processes", context_.world / par.workers},
          {"transport", std::string(comm_.transport().name())},
          {"allreduce", par.allreduce},
          {"bucket_bytes", fusion_.bytes},
          {"bucket_bytes_setting", dp.bucket_bytes},
          {"buckets", sync_->buckets().size()},
          {"overlap", overlap_.overlap},
          {"overlap_setting", dp.overlap},
          {"zero_stage", sharded() ? 1 : 0},
          {"zero_stage_setting", dp.zero_stage},
          {"sum_in_update", fused()},
          {"sum_in_update_setting", dp.sum_in_update},
          {"sync_batch_norm", dp.sync_batch_norm},
          {"compression", codec_.text()},
          {"error_feedback", codec_.error_feedback},
          {"aggregator", dp.aggregator},
          {"attack", dp.attack},
          {"byzantine", dp.byzantine},
          {"predicted_bytes_sent_per_rank_and_step", predicted.first},
          {"predicted_bytes_formula", predicted.second},
          {"mean_compute_seconds", compute / p},
          {"mean_comm_seconds", comm_seconds / p},
          {"mean_wait_seconds", waiting / p},
          {"bytes_sent", sent},
          {"bytes_received", received},
          {"bytes_sent_per_rank_and_step",
           totals.steps > 0 ? sent / static_cast<double>(totals.steps) / p : 0.0},
          {"per_rank", ranks}};
}

}  // namespace dtrain::train
