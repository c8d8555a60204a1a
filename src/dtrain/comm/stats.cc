#include "dtrain/comm/stats.h"

namespace dtrain::comm {

void CommStats::record(std::string_view op, const OpStats& delta) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ops_.find(op);
  if (it == ops_.end()) it = ops_.emplace(std::string(op), OpStats{}).first;
  OpStats& total = it->second;
  total.calls += delta.calls;
  total.bytes_sent += delta.bytes_sent;
  total.bytes_received += delta.bytes_received;
  total.messages_sent += delta.messages_sent;
  total.messages_received += delta.messages_received;
  total.seconds += delta.seconds;
}

OpStats CommStats::get(std::string_view op) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ops_.find(op);
  return it == ops_.end() ? OpStats{} : it->second;
}

std::map<std::string, OpStats, std::less<>> CommStats::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_;
}

void CommStats::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  ops_.clear();
}

}  // namespace dtrain::comm
