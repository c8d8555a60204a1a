#include "dtrain/experiments/preflight.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <utility>

#include "dtrain/base/error.h"
#include "dtrain/base/memory_info.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/spawn_process_ranks.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/data/load.h"
#include "dtrain/train/config.h"
#include "dtrain/train/memory_budget.h"
#include "dtrain/train/run_data.h"
#include "dtrain/train/trainer.h"

namespace dtrain::experiments {
namespace {

constexpr std::uint64_t kSmallTag = 1;
constexpr std::uint64_t kLargeTag = 2;
constexpr std::uint64_t kClockTag = 3;
constexpr std::size_t kHostBytes = 64;
constexpr double kLatencyFloorUs = 10.0;
constexpr std::size_t kDataBytes = 448;  // a rank's data line, truncated

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::int64_t system_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What one process found about the config and its data (once per process: threads share it).
struct ProcessFindings {
  std::vector<std::string> problems;  // config and memory: reported by rank 0's process
  std::string config;
  bool data_ok = true;
  std::string data;
};

ProcessFindings check_config_and_data(const PreflightOptions& options, int ranks) {
  ProcessFindings found;
  if (options.config_path.empty()) {
    found.data = "no --config";
    return found;
  }
  std::optional<train::Config> config;
  try {
    config = train::load_config(options.config_path, options.sets);
  } catch (const Error& e) {
    found.problems.push_back(fmt::format("config: {}", e.what()));
    found.data_ok = false;
    found.data = "not loaded (config invalid)";
    return found;
  }
  found.config = fmt::format("{}: {} on {} ({})", options.config_path, config->model.name,
                             config->data.dataset, config->parallel.strategy);
  try {
    if (data::is_sparse_dataset(config->data.dataset)) {
      const data::SparseSplits sparse = data::load_sparse(train::data_spec(config->data));
      found.data = fmt::format("{} train / {} test, {} features", sparse.train.size(),
                               sparse.test ? sparse.test->size() : 0, sparse.train.num_features);
    } else {
      const train::RunData loaded = train::load_run_data(config->data);
      found.data =
          fmt::format("{} train / {} test samples", loaded.train.size(), loaded.test.size());
      const nn::ModelSpec spec =
          train::model_spec(config->model, loaded.train.sample_shape(), loaded.train.num_classes);
      const auto need = train::estimate_memory_need(*config, spec, options.workers, ranks,
                                                    train::run_data_bytes(loaded));
      if (need) {
        if (auto shortfall = train::memory_shortfall(*need, available_memory())) {
          found.problems.push_back(fmt::format("memory: {}", *shortfall));
        }
      }
    }
  } catch (const Error& e) {
    found.data_ok = false;
    found.data = e.what();
  }
  return found;
}

// A string in a fixed-size, zero-padded field (truncated), for a gather of equal blocks.
template <std::size_t N>
std::array<char, N> field(const std::string& text) {
  std::array<char, N> out{};
  std::memcpy(out.data(), text.data(), std::min(text.size(), N - 1));
  return out;
}

std::string from_field(const char* data, std::size_t n) {
  return std::string(data, strnlen(data, n));
}

// The fastest of `rounds` round trips (after one untimed) between `me` and `peer`: `me` sends
// `out_bytes` and receives kSmallBytes when it starts, else the mirror image. Seconds.
double round_trip(comm::Communicator& comm, int peer, bool starts, std::vector<std::byte>& buffer,
                  std::int64_t out_bytes, std::uint64_t tag, int rounds) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i <= rounds; ++i) {
    const auto start = Clock::now();
    if (starts) {
      comm.send(buffer.data(), out_bytes, DType::kU8, peer, tag);
      comm.recv(buffer.data(), kSmallBytes, DType::kU8, peer, tag);
    } else {
      comm.recv(buffer.data(), out_bytes, DType::kU8, peer, tag);
      comm.send(buffer.data(), kSmallBytes, DType::kU8, peer, tag);
    }
    if (i > 0) best = std::min(best, seconds_since(start));
  }
  return best;
}

}  // namespace

double median_of(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

std::vector<std::string> find_slow_links(const std::vector<LinkMeasurement>& links,
                                         double bandwidth_fraction, double latency_factor) {
  std::vector<double> latencies;
  std::vector<double> bandwidths;
  for (const auto& link : links) {
    latencies.push_back(link.latency_us);
    bandwidths.push_back(link.bandwidth_gbs);
  }
  const double latency = median_of(latencies);
  const double bandwidth = median_of(bandwidths);
  std::vector<std::string> problems;
  for (const auto& link : links) {
    std::vector<std::string> why;
    if (link.bandwidth_gbs < bandwidth_fraction * bandwidth) {
      why.push_back(fmt::format("bandwidth {:.3g} GB/s < {:.3g} x the median {:.3g} GB/s",
                                link.bandwidth_gbs, bandwidth_fraction, bandwidth));
    }
    // ... and 10 us above it: threads that share cores wake up in 0.4 or 4 us by chance.
    if (link.latency_us > latency_factor * latency && link.latency_us > latency + kLatencyFloorUs) {
      why.push_back(fmt::format("latency {:.3g} us > {:.3g} x the median {:.3g} us",
                                link.latency_us, latency_factor, latency));
    }
    if (why.empty()) continue;
    problems.push_back(fmt::format("slow link {} -> {}: {}", link.from, link.to,
                                   why.size() == 1 ? why[0] : why[0] + ", " + why[1]));
  }
  return problems;
}

void judge_preflight(PreflightReport& report, const PreflightOptions& options) {
  // Ranks that fail the same way are one problem: "ranks 0, 1 (vm): data: ...".
  std::vector<std::pair<std::string, std::string>> data_failures;  // (message, ranks)
  for (const auto& rank : report.rank_reports) {
    if (rank.data_ok) continue;
    const std::string who = fmt::format("{} ({})", rank.rank, rank.host);
    auto same = std::find_if(data_failures.begin(), data_failures.end(),
                             [&](const auto& failure) { return failure.first == rank.data; });
    if (same == data_failures.end()) {
      data_failures.emplace_back(rank.data, "rank " + who);
    } else {
      same->second =
          (same->second.starts_with("rank ") ? "ranks " + same->second.substr(5) : same->second) +
          ", " + who;
    }
  }
  for (const auto& [message, ranks] : data_failures) {
    report.problems.push_back(fmt::format("{}: data: {}", ranks, message));
  }
  for (const auto& rank : report.rank_reports) {
    if (std::abs(rank.clock_offset_us) > options.clock_offset_limit_ms * 1000.0) {
      report.problems.push_back(fmt::format(
          "rank {} ({}): clock {:+.1f} ms from rank 0's (limit {} ms); synchronise the hosts' "
          "clocks (chrony, NTP) or traces and logs will not line up",
          rank.rank, rank.host, rank.clock_offset_us / 1000.0, options.clock_offset_limit_ms));
    }
  }
  std::vector<double> latencies;
  std::vector<double> bandwidths;
  for (const auto& link : report.links) {
    latencies.push_back(link.latency_us);
    bandwidths.push_back(link.bandwidth_gbs);
  }
  report.median_latency_us = median_of(latencies);
  report.median_bandwidth_gbs = median_of(bandwidths);
  for (auto& problem : find_slow_links(report.links, options.slow_bandwidth_fraction,
                                       options.slow_latency_factor)) {
    report.problems.push_back(std::move(problem));
  }
}

std::string verdict_line(const PreflightReport& report) {
  if (report.problems.empty()) return "verdict: ready";
  std::string line = fmt::format("verdict: {} problem{}: ", report.problems.size(),
                                 report.problems.size() == 1 ? "" : "s");
  for (std::size_t i = 0; i < report.problems.size(); ++i) {
    line += (i == 0 ? "" : "; ") + report.problems[i];
  }
  return line;
}

std::string format_preflight(const PreflightReport& report) {
  std::string out = fmt::format("dtrain check: {} rank{}, {}\n", report.ranks,
                                report.ranks == 1 ? "" : "s", report.transport);
  if (!report.config.empty()) out += fmt::format("config {}\n", report.config);
  if (!report.rank_reports.empty()) {
    out += fmt::format("{:>4}  {:<20} {:>22}  {}\n", "rank", "host", "clock vs rank 0", "data");
    for (const auto& rank : report.rank_reports) {
      const std::string clock = rank.rank == 0 ? std::string("0 (reference)")
                                               : fmt::format("{:+.0f} us +- {:.0f}",
                                                             std::round(rank.clock_offset_us) + 0.0,
                                                             rank.clock_uncertainty_us);
      // A failure's message is in the verdict; the table keeps one screen wide.
      const std::string data = rank.data_ok ? rank.data : "FAILED (see the verdict)";
      out += fmt::format("{:>4}  {:<20} {:>22}  {}\n", rank.rank, rank.host, clock, data);
    }
  }
  if (!report.links.empty()) {
    // One screen: every link up to 16, else the 8 slowest by bandwidth.
    std::vector<LinkMeasurement> shown = report.links;
    std::string note;
    if (shown.size() > 16) {
      std::sort(shown.begin(), shown.end(),
                [](const auto& a, const auto& b) { return a.bandwidth_gbs < b.bandwidth_gbs; });
      shown.resize(8);
      note = fmt::format(" (the 8 slowest of {})", report.links.size());
    }
    out += fmt::format("links{}: latency = half a round trip of {} B, bandwidth = {} B one way\n",
                       note, kSmallBytes, report.large_bytes);
    out += fmt::format("{:>4} {:>4} {:>12} {:>16}\n", "from", "to", "latency us", "bandwidth GB/s");
    for (const auto& link : shown) {
      out += fmt::format("{:>4} {:>4} {:>12.1f} {:>16.3f}\n", link.from, link.to, link.latency_us,
                         link.bandwidth_gbs);
    }
    out += fmt::format("{:>9} {:>12.1f} {:>16.3f}\n", "median", report.median_latency_us,
                       report.median_bandwidth_gbs);
  }
  out += verdict_line(report) + "\n";
  return out;
}

PreflightReport run_preflight(const PreflightOptions& options) {
  if (options.workers < 1) {
    throw ConfigError(fmt::format("--workers {} is not >= 1", options.workers));
  }
  if (options.large_bytes < kSmallBytes) {
    throw ConfigError(fmt::format("--bytes {} is not >= {}", options.large_bytes, kSmallBytes));
  }
  const bool mpi = comm::launched_by_mpirun();
  const int ranks = mpi ? options.workers * comm::mpi_world_size() : options.workers;
  PreflightReport report;
  report.ranks = ranks;
  report.large_bytes = options.large_bytes;
  report.transport = !mpi                   ? "threads of one process (inproc transport)"
                     : options.workers == 1 ? "one process each (mpi transport)"
                                            : fmt::format("{} threads x {} processes (hybrid)",
                                                          options.workers, comm::mpi_world_size());
  const ProcessFindings found = check_config_and_data(options, ranks);
  report.config = found.config;
  std::mutex report_mutex;
  std::int64_t problem_count = 0;
  bool this_process_has_rank0 = false;

  comm::CommOptions comm_options;
  comm_options.timeout = options.timeout;
  comm_options.timeout_setting = "dtrain check --timeout";
  comm_options.stall_warning = std::chrono::milliseconds(0);
  const std::function<void(comm::Communicator&)> body = [&](comm::Communicator& comm) {
    const int me = comm.rank();
    const int p = comm.size();
    if (me == 0) {
      const std::lock_guard<std::mutex> lock(report_mutex);
      this_process_has_rank0 = true;
    }
    try {
      comm.barrier();  // reachable: names the ranks that do not arrive
    } catch (const Error& e) {
      if (me != 0) throw;
      const std::lock_guard<std::mutex> lock(report_mutex);
      report.problems.push_back(fmt::format("reachability: {}", e.what()));
      return;
    }
    // Hosts and data lines at rank 0.
    char host[kHostBytes] = {};
    if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
    auto host_field = field<kHostBytes>(host);
    auto data_field = field<kDataBytes>((found.data_ok ? "1" : "0") + found.data);
    std::vector<char> hosts(me == 0 ? kHostBytes * static_cast<std::size_t>(p) : 0);
    std::vector<char> datas(me == 0 ? kDataBytes * static_cast<std::size_t>(p) : 0);
    comm.gather(host_field.data(), hosts.data(), kHostBytes, DType::kU8, 0);
    comm.gather(data_field.data(), datas.data(), kDataBytes, DType::kU8, 0);

    // Links: every ordered pair in turn.
    std::vector<std::byte> buffer(static_cast<std::size_t>(options.large_bytes));
    std::vector<double> mine(2 * static_cast<std::size_t>(p), 0.0);  // latency s, one-way s
    for (int from = 0; from < p; ++from) {
      for (int to = 0; to < p; ++to) {
        if (from == to) continue;
        if (p > 2) comm.barrier();
        if (me != from && me != to) continue;
        const int peer = me == from ? to : from;
        const bool starts = me == from;
        const double small =
            round_trip(comm, peer, starts, buffer, kSmallBytes, kSmallTag, options.small_rounds);
        const double large = round_trip(comm, peer, starts, buffer, options.large_bytes, kLargeTag,
                                        options.large_rounds);
        if (starts) {
          mine[static_cast<std::size_t>(to)] = small / 2.0;
          mine[static_cast<std::size_t>(p + to)] = large - small / 2.0;
        }
      }
    }
    std::vector<double> all(me == 0 ? mine.size() * static_cast<std::size_t>(p) : 0);
    comm.gather(mine.data(), all.data(), static_cast<std::int64_t>(mine.size()), DType::kF64, 0);

    // Clocks: rank 0 against each rank, NTP-style.
    std::vector<double> offsets(static_cast<std::size_t>(p), 0.0);
    std::vector<double> uncertainty(static_cast<std::size_t>(p), 0.0);
    for (int r = 1; r < p; ++r) {
      if (me != 0 && me != r) continue;
      double best_round = std::numeric_limits<double>::infinity();
      for (int k = 0; k < options.clock_rounds; ++k) {
        std::int64_t stamp = 0;
        if (me == 0) {
          const std::int64_t sent = system_now_us();
          comm.send(&stamp, 1, DType::kI64, r, kClockTag);
          comm.recv(&stamp, 1, DType::kI64, r, kClockTag);
          const std::int64_t back = system_now_us();
          const auto round = static_cast<double>(back - sent);
          if (round < best_round) {
            best_round = round;
            offsets[static_cast<std::size_t>(r)] =
                static_cast<double>(stamp) - static_cast<double>(sent + back) / 2.0;
            uncertainty[static_cast<std::size_t>(r)] = round / 2.0;
          }
        } else {
          comm.recv(&stamp, 1, DType::kI64, 0, kClockTag);
          stamp = system_now_us();
          comm.send(&stamp, 1, DType::kI64, 0, kClockTag);
        }
      }
    }

    std::int64_t count = 0;
    if (me == 0) {
      const std::lock_guard<std::mutex> lock(report_mutex);
      for (int r = 0; r < p; ++r) {
        const auto at = static_cast<std::size_t>(r);
        RankReport rank;
        rank.rank = r;
        rank.host = from_field(hosts.data() + at * kHostBytes, kHostBytes);
        const std::string data = from_field(datas.data() + at * kDataBytes, kDataBytes);
        rank.data_ok = !data.empty() && data[0] == '1';
        rank.data = data.empty() ? std::string() : data.substr(1);
        rank.clock_offset_us = offsets[at];
        rank.clock_uncertainty_us = uncertainty[at];
        report.rank_reports.push_back(rank);
        for (int to = 0; to < p; ++to) {
          if (to == r) continue;
          const double latency = all[at * mine.size() + static_cast<std::size_t>(to)];
          const double one_way = all[at * mine.size() + static_cast<std::size_t>(p + to)];
          report.links.push_back(
              {r, to, latency * 1e6,
               static_cast<double>(options.large_bytes) / std::max(one_way, 1e-12) / 1e9});
        }
      }
      for (const auto& problem : found.problems) report.problems.push_back(problem);
      judge_preflight(report, options);
      count = static_cast<std::int64_t>(report.problems.size());
    }
    // Every process learns the verdict, so that all exit alike.
    comm.broadcast(&count, 1, DType::kI64, 0);
    if (me != 0) {
      const std::lock_guard<std::mutex> lock(report_mutex);
      problem_count = count;
    }
  };
  if (mpi) {
    comm::spawn_process_ranks(options.workers, body, comm_options);
  } else {
    comm::spawn_ranks(options.workers, body, comm_options, comm::RankPinning::kNever);
  }
  if (!this_process_has_rank0) {
    report.problems.assign(static_cast<std::size_t>(problem_count), std::string());
  }
  return report;
}

}  // namespace dtrain::experiments
