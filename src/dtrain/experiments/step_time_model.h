// The predicted step time of compressed data parallelism, per codec (issue 20: "whether compression
// pays"; docs/COMPRESSION.md, "Predicted step time"). For each run of `dtrain sweep --compression`
// it predicts, from quantities measured apart from the run, the step time beside the one the run
// measured, and the same step with fp16 and with 32-bit gradients (the fair baselines):
//
//   T(codec) = T_compute + T_codec + T_comm
//   T_compute  forward + backward + update of one step: the run's own measured compute seconds
//              per step (summary.json's mean_compute_seconds / steps), the same in its baselines
//   T_codec    encode(n) + d decode(n), measured on one core by `dtrain bench compression`'s
//              timing, n = the model's parameters; d = P for gather codecs (every rank decodes
//              every rank's payload), 1 otherwise; 0 for none. PowerSGD: its compress of n viewed
//              as one near-square matrix (the run compresses each weight matrix in its own shape)
//   T_comm     m alpha + B beta, B = the bytes each rank sends per step by the codec's formula
//              (summary.json's predicted_bytes_sent_per_rank_and_step; ring collectives),
//              m = messages each rank sends per step: 2 (P-1) per bucket for a ring allreduce,
//              (P-1) for a ring allgather, 4 (P-1) for PowerSGD's two allreduces
//   alpha, beta  the link's latency and 1 / bandwidth, as `dtrain check` measures them between the
//              sweep's ranks (the median of every ordered pair's best round trips)
//
// Nothing overlaps in the model (communication after backward): with overlap on, the measured step
// can be shorter than predicted by up to min(T_compute, T_comm).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/compress/codec_spec.h"
#include "dtrain/experiments/sweep.h"

namespace dtrain::experiments {

struct LinkModel {
  double alpha = 0.0;  // seconds per message
  double beta = 0.0;   // seconds per byte
};

// encode + decode of n floats on one core, seconds per call.
struct CodecCost {
  double encode = 0.0;
  double decode = 0.0;
};

struct StepTimeTerms {
  double compute = 0.0;
  double codec = 0.0;
  double comm = 0.0;
  double messages = 0.0;  // m
  double bytes = 0.0;     // B
  double total() const { return compute + codec + comm; }
};

// m: messages each rank sends per step for `buckets` buckets over `ranks` ranks (formula above).
double messages_per_step(const compress::CodecSpec& spec, int ranks, std::int64_t buckets);
// B for the ring formulas of docs/COMPRESSION.md over n parameters in one piece (none: 2 (P-1)/P
// 4n; fp16, bf16: 2 (P-1)/P 2n), for the baselines a run did not measure.
double cast_bytes_per_step(const compress::CodecSpec& spec, int ranks, std::int64_t parameters);
// The three terms (pure).
StepTimeTerms predict_step_time(const compress::CodecSpec& spec, int ranks, std::int64_t buckets,
                                double bytes_per_step, double compute_seconds,
                                const CodecCost& cost, const LinkModel& link);

struct StepTimeRow {
  std::string codec;
  int ranks = 1;
  StepTimeTerms predicted;
  // The run's mean step (train_seconds / steps: the same mean as T_compute's) and its median
  // (summary.json's step_seconds_median; below the mean where a loaded machine stretches a few).
  double measured = 0.0;
  double measured_median = 0.0;
  double predicted_fp16 = 0.0;  // the same step with fp16, then 32-bit, gradients
  double predicted_none = 0.0;
};

struct StepTimeReport {
  LinkModel link;
  double link_latency_us = 0.0;  // as dtrain check reports them
  double link_bandwidth_gbs = 0.0;
  std::vector<StepTimeRow> rows;
};

// Predictions for the sweep's data-parallel rows that name a codec (the axis
// data_parallel.compression), reading each run's summary.json; measures the link (ranks as
// threads, as `dtrain check --workers P`) and each codec's cost (`repeats` timed runs).
StepTimeReport predict_sweep_step_times(const SweepResult& result, int repeats = 3);

std::string step_time_table(const StepTimeReport& report);
nlohmann::json step_time_json(const StepTimeReport& report);

}  // namespace dtrain::experiments
