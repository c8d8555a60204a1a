#include "dtrain/experiments/step_time_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "dtrain/base/error.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/experiments/compression_benchmark.h"
#include "dtrain/experiments/preflight.h"

namespace dtrain::experiments {
namespace {

constexpr const char* kCompressionKey = "data_parallel.compression";

nlohmann::json read_summary(const std::string& run_dir) {
  const auto path = std::filesystem::path(run_dir) / "summary.json";
  std::ifstream in(path);
  if (!in) throw DataError(fmt::format("{}: cannot be read", path.string()));
  return nlohmann::json::parse(in);
}

}  // namespace

double messages_per_step(const compress::CodecSpec& spec, int ranks, std::int64_t buckets) {
  const double per_bucket = [&] {
    switch (spec.exchange()) {
      case compress::Exchange::kGather: return 1.0;
      case compress::Exchange::kLowRank: return 4.0;
      case compress::Exchange::kSummable: return 2.0;
    }
    return 2.0;
  }();
  return per_bucket * (ranks - 1) * static_cast<double>(buckets);
}

double cast_bytes_per_step(const compress::CodecSpec& spec, int ranks, std::int64_t parameters) {
  const double element = spec.kind == compress::CodecKind::kNone ? 4.0 : 2.0;
  return 2.0 * (ranks - 1) / ranks * element * static_cast<double>(parameters);
}

StepTimeTerms predict_step_time(const compress::CodecSpec& spec, int ranks, std::int64_t buckets,
                                double bytes_per_step, double compute_seconds,
                                const CodecCost& cost, const LinkModel& link) {
  StepTimeTerms t;
  t.compute = compute_seconds;
  if (spec.kind != compress::CodecKind::kNone) {
    const double decodes = spec.exchange() == compress::Exchange::kGather ? ranks : 1.0;
    t.codec = cost.encode + decodes * cost.decode;
  }
  t.messages = messages_per_step(spec, ranks, buckets);
  t.bytes = bytes_per_step;
  t.comm = t.messages * link.alpha + t.bytes * link.beta;
  return t;
}

StepTimeReport predict_sweep_step_times(const SweepResult& result, int repeats) {
  StepTimeReport report;
  const auto axis = std::find_if(result.axes.begin(), result.axes.end(),
                                 [](const SweepAxis& a) { return a.key == kCompressionKey; });
  if (axis == result.axes.end()) return report;
  const auto column = static_cast<std::size_t>(axis - result.axes.begin());
  struct Run {
    const SweepRow* row;
    nlohmann::json summary;
  };
  // The link, measured between as many ranks as the widest run had: collective under mpirun
  // (every process of the sweep calls this; the ranks are the hosts' own, so the link is theirs).
  int widest = 1;
  for (const SweepRow& row : result.rows) widest = std::max(widest, row.ranks);
  if (widest > 1) {
    const int processes = comm::launched_by_mpirun() ? comm::mpi_world_size() : 1;
    PreflightOptions check;
    check.workers = std::max(1, widest / processes);
    const PreflightReport links = run_preflight(check);
    report.link_latency_us = links.median_latency_us;
    report.link_bandwidth_gbs = links.median_bandwidth_gbs;
    report.link.alpha = links.median_latency_us * 1e-6;
    report.link.beta =
        links.median_bandwidth_gbs > 0 ? 1.0 / (links.median_bandwidth_gbs * 1e9) : 0.0;
  }
  // The run folders are rank 0's (it writes summary.json).
  if (comm::launched_by_mpirun() && comm::mpi_world_rank() != 0) return report;
  std::vector<Run> runs;
  std::int64_t parameters = 0;
  for (const SweepRow& row : result.rows) {
    nlohmann::json summary = read_summary(row.run_dir);
    const nlohmann::json& p = summary["parallel"];
    if (p.value("strategy", "") != "data_parallel") continue;
    parameters = summary.value("parameters", std::int64_t{0});
    runs.push_back({&row, std::move(summary)});
  }
  if (runs.empty()) return report;
  // The codecs' costs at the model's size, fp16 among them (a baseline).
  std::vector<std::string> codecs = {"fp16"};
  for (const Run& run : runs) {
    const std::string& codec = run.row->point[column];
    if (codec != "none" && std::find(codecs.begin(), codecs.end(), codec) == codecs.end()) {
      codecs.push_back(codec);
    }
  }
  std::map<std::string, CodecCost> costs;
  for (const CompressionBenchmarkRow& b :
       run_compression_benchmark(codecs, std::max<std::int64_t>(parameters, 1), repeats)) {
    costs[b.codec] = {b.encode_ms * 1e-3, b.decode_ms * 1e-3};
  }
  for (const Run& run : runs) {
    const nlohmann::json& p = run.summary["parallel"];
    const std::string& codec = run.row->point[column];
    const compress::CodecSpec spec = compress::parse_codec(codec);
    StepTimeRow row;
    row.codec = codec;
    row.ranks = p.value("ranks", 1);
    const auto buckets = p.value("buckets", std::int64_t{1});
    const double steps = std::max(1.0, run.summary.value("steps", 1.0));
    const double compute = p.value("mean_compute_seconds", 0.0) / steps;
    row.predicted = predict_step_time(spec, row.ranks, buckets,
                                      p.value("predicted_bytes_sent_per_rank_and_step", 0.0),
                                      compute, costs[codec], report.link);
    row.measured = run.summary.value("train_seconds", 0.0) / steps;
    row.measured_median = run.summary.value("step_seconds_median", 0.0);
    const compress::CodecSpec fp16 = compress::parse_codec("fp16");
    const compress::CodecSpec none = compress::parse_codec("none");
    row.predicted_fp16 = predict_step_time(fp16, row.ranks, buckets,
                                           cast_bytes_per_step(fp16, row.ranks, parameters),
                                           compute, costs["fp16"], report.link)
                             .total();
    row.predicted_none = predict_step_time(none, row.ranks, buckets,
                                           cast_bytes_per_step(none, row.ranks, parameters),
                                           compute, {}, report.link)
                             .total();
    report.rows.push_back(row);
  }
  return report;
}

std::string step_time_table(const StepTimeReport& report) {
  if (report.rows.empty()) return "";
  std::string text = fmt::format(
      "predicted step time = compute + codec (encode + d decode) + m alpha + B beta; link alpha "
      "{:.1f} us, beta 1 / {:.2f} GB/s (dtrain check's measurement); no overlap assumed\n",
      report.link_latency_us, report.link_bandwidth_gbs);
  text += fmt::format("{:<14} {:>3} {:>10} {:>9} {:>9} {:>10} {:>12} {:>11} {:>9} {:>7} {:>7}\n",
                      "codec", "P", "compute_ms", "codec_ms", "comm_ms", "B_per_step",
                      "predicted_ms", "measured_ms", "median_ms", "x_fp16", "x_32bit");
  for (const StepTimeRow& row : report.rows) {
    const double total = row.predicted.total();
    text += fmt::format(
        "{:<14} {:>3} {:>10.3f} {:>9.3f} {:>9.3f} {:>10.0f} {:>12.3f} {:>11.3f} {:>9.3f} {:>7.2f} "
        "{:>7.2f}\n",
        row.codec, row.ranks, 1e3 * row.predicted.compute, 1e3 * row.predicted.codec,
        1e3 * row.predicted.comm, row.predicted.bytes, 1e3 * total, 1e3 * row.measured,
        1e3 * row.measured_median, total > 0 ? row.predicted_fp16 / total : 0.0,
        total > 0 ? row.predicted_none / total : 0.0);
  }
  text +=
      "measured_ms: the run's mean step (train_seconds / steps), as compute_ms is a mean; "
      "median_ms: its median step\n"
      "x_fp16, x_32bit: predicted speedup of the step over the same step with fp16 / 32-bit "
      "gradients (> 1: the codec pays)\n";
  return text;
}

nlohmann::json step_time_json(const StepTimeReport& report) {
  nlohmann::json rows = nlohmann::json::array();
  for (const StepTimeRow& row : report.rows) {
    rows.push_back({{"codec", row.codec},
                    {"ranks", row.ranks},
                    {"compute_seconds", row.predicted.compute},
                    {"codec_seconds", row.predicted.codec},
                    {"comm_seconds", row.predicted.comm},
                    {"messages_per_step", row.predicted.messages},
                    {"bytes_per_step", row.predicted.bytes},
                    {"predicted_step_seconds", row.predicted.total()},
                    {"measured_step_seconds", row.measured},
                    {"measured_step_seconds_median", row.measured_median},
                    {"predicted_fp16_step_seconds", row.predicted_fp16},
                    {"predicted_32bit_step_seconds", row.predicted_none}});
  }
  return {{"formula",
           "T = compute + (encode + d decode) + m alpha + B beta; d = P for allgathered codecs, "
           "1 otherwise; m = 2 (P-1) per bucket (ring allreduce), (P-1) (allgather), 4 (P-1) "
           "(PowerSGD)"},
          {"alpha_seconds", report.link.alpha},
          {"beta_seconds_per_byte", report.link.beta},
          {"rows", rows}};
}

}  // namespace dtrain::experiments
