#include "dtrain/train/trace.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/train/atomic_file.h"

namespace dtrain::train {

void TraceRecorder::start(Clock::time_point origin) {
  origin_ = origin;
  enabled_ = true;
}

void TraceRecorder::add(const std::string& name, const char* category, int thread,
                        Clock::time_point begin, Clock::time_point end,
                        const std::string& args_json) {
  if (!enabled_) return;
  const auto us = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  };
  events_.push_back(
      {name, category, thread, us(begin), std::max(0.0, us(end) - us(begin)), args_json});
}

std::string TraceRecorder::events_json(int rank) const {
  std::string out;
  auto append = [&](const std::string& event) {
    if (!out.empty()) out += ",\n";
    out += event;
  };
  append(fmt::format(R"({{"name":"process_name","ph":"M","pid":{},"args":{{"name":"rank {}"}}}})",
                     rank, rank));
  append(fmt::format(
      R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"compute"}}}})", rank,
      kComputeThread));
  append(fmt::format(
      R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"communication"}}}})",
      rank, kCommThread));
  for (const auto& e : events_) {
    append(fmt::format(
        R"({{"name":{},"cat":"{}","ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f}{}}})",
        nlohmann::json(e.name).dump(), e.category, rank, e.thread, e.ts_us, e.dur_us,
        e.args_json.empty() ? "" : ",\"args\":" + e.args_json));
  }
  return out;
}

void write_trace(comm::Communicator* comm, const TraceRecorder& recorder, const std::string& path) {
  constexpr std::uint64_t kTraceTag = 0x7472616365;  // "trace"
  const int rank = comm != nullptr ? comm->rank() : 0;
  std::string mine = recorder.events_json(rank);
  if (rank != 0) {
    std::int64_t length = static_cast<std::int64_t>(mine.size());
    comm->send(&length, 1, DType::kI64, 0, kTraceTag);
    comm->send(mine.data(), length, DType::kU8, 0, kTraceTag);
    return;
  }
  std::string all = std::move(mine);
  for (int r = 1; comm != nullptr && r < comm->size(); ++r) {
    std::int64_t length = 0;
    comm->recv(&length, 1, DType::kI64, r, kTraceTag);
    std::string events(static_cast<std::size_t>(length), '\0');
    comm->recv(events.data(), length, DType::kU8, r, kTraceTag);
    all += ",\n" + events;
  }
  // trace.json is a diagnostic: failing to write it (a full disk) must not cost a finished run.
  try {
    write_file_atomically(path, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n" + all + "\n]}\n");
  } catch (const Error& e) {
    log::warn("{}; the trace is left out and the run goes on", e.what());
  }
}

}  // namespace dtrain::train
