// Traffic and time per operation ("allreduce", "broadcast", ..., "send", "recv", and
// "header_check" for the argument check that precedes collectives), counted by the Communicator
// for its rank. Tests compare these counts with the seeds' formulas; benchmarks divide by time.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace dtrain::comm {

struct OpStats {
  std::int64_t calls = 0;
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;
  std::int64_t messages_sent = 0;
  std::int64_t messages_received = 0;
  double seconds = 0.0;
};

// Thread-safe: the caller's thread and the communicator's async thread both record.
class CommStats {
 public:
  void record(std::string_view op, const OpStats& delta);
  // Zeros for an operation never recorded.
  OpStats get(std::string_view op) const;
  std::map<std::string, OpStats, std::less<>> snapshot() const;
  void reset();

 private:
  mutable std::mutex mu_;
  std::map<std::string, OpStats, std::less<>> ops_;
};

}  // namespace dtrain::comm
