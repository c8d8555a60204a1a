// trace.json: a Chrome trace (the JSON Trace Event Format that Perfetto and chrome://tracing open)
// of the first parallel.trace_steps steps of a run: one process per rank ("rank r"), thread 0 its
// compute (forward, backward, waiting for buckets, optimizer step) and thread 1 its communication
// (each gradient bucket's allreduce), so overlap and stragglers are visible at a glance.
//
// Each rank records into its own TraceRecorder (no locks); at the end rank 0 collects every rank's
// events (trace_collect, point-to-point over the communicator) and writes one file. Timestamps are
// microseconds since a clock origin taken right after a barrier on every rank, so ranks line up to
// within the barrier's skew (microseconds in one process, more across hosts).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.h"

namespace dtrain::train {

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kComputeThread = 0;
  static constexpr int kCommThread = 1;

  TraceRecorder() = default;
  // Starts recording with `origin` as time zero.
  void start(Clock::time_point origin);
  bool enabled() const { return enabled_; }
  void stop() { enabled_ = false; }

  // A complete event ("ph":"X") on `thread`; args_json: a JSON object's text or empty.
  void add(const std::string& name, const char* category, int thread, Clock::time_point begin,
           Clock::time_point end, const std::string& args_json = {});

  // This rank's events as a JSON array's elements (comma-separated, no brackets), with pid = rank.
  std::string events_json(int rank) const;
  std::size_t size() const { return events_.size(); }

 private:
  struct Event {
    std::string name;
    const char* category;
    int thread;
    double ts_us;
    double dur_us;
    std::string args_json;
  };
  bool enabled_ = false;
  Clock::time_point origin_{};
  std::vector<Event> events_;
};

// Collective (point-to-point to rank 0). Rank 0 writes `path` with every rank's events and the
// process/thread names; other ranks only send. `comm` may be null (one rank). A file that cannot
// be written (full disk, unwritable folder) is one warning, not an error: the trace is a
// diagnostic and never costs the run. Communication errors still throw.
void write_trace(comm::Communicator* comm, const TraceRecorder& recorder, const std::string& path);

}  // namespace dtrain::train
