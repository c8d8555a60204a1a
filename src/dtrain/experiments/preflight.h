// `dtrain check`: a pre-flight of the ranks a run would use, before the run: every rank reachable,
// each ordered pair's latency and bandwidth, each rank's clock against rank 0's, host names, and,
// with a config, the config valid, the model within memory and the data set readable on every rank.
// What it finds is a list of problems; the verdict is "ready" when there is none.
//
// Method (ranks are the threads of `dtrain check --workers N`, or the processes of `mpirun -np N
// dtrain check`):
//   reachable  a barrier with the check's deadline; a rank that does not arrive is named by the
//              communicator's header check ("ranks ... did not arrive")
//   links      for every ordered pair (i, j), one after the other (a barrier between pairs when
//              P > 2, so no two pairs share the machine): i and j ping-pong kSmallBytes
//              small_rounds times, then i sends large_bytes and j answers kSmallBytes,
//              large_rounds times, after one untimed round of each; the fastest round of each
//              kind counts (preemption only adds time). latency = small round trip / 2;
//              bandwidth = large_bytes / (large round - latency)
//   clocks     rank 0 and each rank r ping-pong system_clock stamps clock_rounds times; with the
//              round trip of smallest duration, offset = t_r - (t0_send + t0_recv) / 2, uncertain
//              by half that round trip (NTP's estimate)
//   data       with a config, each process loads the config's data set once (threads share a
//              process and its files); errors are kept per rank, not thrown
// Slow links (find_slow_links) are judged against the median of all links: bandwidth below
// slow_bandwidth_fraction x the median, or latency above slow_latency_factor x the median and more
// than 10 us above it (ranks that are threads on shared cores differ by a few us by chance).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::experiments {

inline constexpr std::int64_t kSmallBytes = 8;

struct PreflightOptions {
  int workers = 2;          // ranks as threads (without mpirun); under mpirun, threads per process
  std::string config_path;  // empty: no config, no data check
  std::vector<std::string> sets;             // "key=value" overrides of the config
  std::chrono::milliseconds timeout{10000};  // deadline of every wait (reachability)
  std::int64_t large_bytes = std::int64_t{1} << 20;
  int small_rounds = 10;
  int large_rounds = 10;  // best of: a loaded machine slows single transfers by several times
  int clock_rounds = 5;
  double slow_bandwidth_fraction = 0.5;
  double slow_latency_factor = 2.0;
  // |offset| above this is a problem: logs and traces of the ranks would not line up.
  double clock_offset_limit_ms = 100.0;
};

// One ordered pair: `from` started the round trips.
struct LinkMeasurement {
  int from = 0;
  int to = 0;
  double latency_us = 0.0;
  double bandwidth_gbs = 0.0;  // GB/s (1e9 bytes)
};

struct RankReport {
  int rank = 0;
  std::string host;
  double clock_offset_us = 0.0;       // this rank's clock minus rank 0's
  double clock_uncertainty_us = 0.0;  // +- half the best round trip
  bool data_ok = true;                // true also when no config was given
  std::string data;                   // "60000 train / 10000 test" or the error
};

struct PreflightReport {
  std::string transport;  // "inproc (threads)", "mpi", "hybrid"
  int ranks = 0;
  std::string config;            // the config's path and what it trains, or empty
  std::int64_t large_bytes = 0;  // the bandwidth message's size
  std::vector<RankReport> rank_reports;
  std::vector<LinkMeasurement> links;
  double median_latency_us = 0.0;
  double median_bandwidth_gbs = 0.0;
  std::vector<std::string> problems;  // empty: ready
};

// The median of `values` (mean of the two middle ones for an even count); 0 when empty.
double median_of(std::vector<double> values);

// One problem per link slower than the median by the rule above, naming the pair and both
// figures, e.g. "link 2 -> 3: bandwidth 0.41 GB/s < 1/2 of the median 4.20 GB/s". Pure.
std::vector<std::string> find_slow_links(const std::vector<LinkMeasurement>& links,
                                         double bandwidth_fraction, double latency_factor);

// Every problem of `report` (its ranks' data and clocks, its slow links) appended to the problems
// already in it (config, memory, reachability). Pure.
void judge_preflight(PreflightReport& report, const PreflightOptions& options);

// "verdict: ready" or "verdict: N problems: a; b; c".
std::string verdict_line(const PreflightReport& report);

// The one-screen table (hosts, clocks, data, links, medians) and the verdict line.
std::string format_preflight(const PreflightReport& report);

// Runs the check on this process's ranks (threads, or this process's part of the mpirun job).
// Rank 0's process gets the full report; other processes of an mpirun job get one with only the
// problem count filled (as that many empty problems), so that every process exits alike.
PreflightReport run_preflight(const PreflightOptions& options);

}  // namespace dtrain::experiments
