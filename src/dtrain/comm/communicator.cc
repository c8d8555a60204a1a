#include "dtrain/comm/communicator.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "dtrain/base/env.h"
#include "dtrain/base/error.h"
#include "dtrain/base/timer.h"
#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/channel.h"
#include "dtrain/comm/comm_error.h"

namespace dtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = Communicator::Kind;

// Tag layout. Collectives: bits 24..62 sequence number, 8..23 the caller's tag, 0..7 the phase.
// Point-to-point: bit 63 set, the caller's tag below.
constexpr std::uint64_t kPointToPointBit = std::uint64_t{1} << 63;
constexpr std::uint64_t kPhaseData = 0;
constexpr std::uint64_t kPhaseHeader = 1;
constexpr std::uint64_t kPhaseVerdict = 2;
constexpr int kHeaderRoot = 0;

std::uint64_t collective_tag(std::uint64_t seq, std::uint16_t tag, std::uint64_t phase) {
  return ((seq & ((std::uint64_t{1} << 39) - 1)) << 24) | (std::uint64_t{tag} << 8) | phase;
}

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::kBarrier: return "barrier";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kAllreduce: return "allreduce";
    case Kind::kReduce: return "reduce";
    case Kind::kAllgather: return "allgather";
    case Kind::kReduceScatter: return "reduce_scatter";
  }
  return "?";
}

// The one algorithm of each non-allreduce collective.
std::string_view fixed_algorithm(Kind kind) {
  switch (kind) {
    case Kind::kBarrier:
    case Kind::kBroadcast:
    case Kind::kReduce: return "binomial";
    case Kind::kAllgather:
    case Kind::kReduceScatter: return "ring";
    case Kind::kAllreduce: break;
  }
  return "";
}

bool reduces(Kind kind) {
  return kind == Kind::kAllreduce || kind == Kind::kReduce || kind == Kind::kReduceScatter;
}
bool rooted(Kind kind) { return kind == Kind::kBroadcast || kind == Kind::kReduce; }

// What each rank tells rank 0 before a collective (fits the transport's eager size).
struct WireHeader {
  std::uint64_t seq;
  std::int64_t count;
  std::int32_t root;
  std::uint16_t tag;
  std::uint8_t kind;
  std::uint8_t dtype;
  std::uint8_t op;
  std::array<char, 39> algorithm;
};
static_assert(sizeof(WireHeader) <= 256);

// Rank 0's answer: ok, or the message every rank throws (as CommTimeoutError when ranks are
// missing, CommError otherwise).
constexpr std::uint8_t kVerdictError = 0;
constexpr std::uint8_t kVerdictOk = 1;
constexpr std::uint8_t kVerdictMissing = 2;
struct WireVerdict {
  std::uint8_t ok;
  std::array<char, 247> message;
};
static_assert(sizeof(WireVerdict) <= 256);

WireHeader make_header(Kind kind, std::uint64_t seq, std::int64_t count, DType dtype, ReduceOp op,
                       int root, std::uint16_t tag, const std::string& algorithm) {
  WireHeader header{};
  header.seq = seq;
  header.count = count;
  header.root = root;
  header.tag = tag;
  header.kind = static_cast<std::uint8_t>(kind);
  header.dtype = static_cast<std::uint8_t>(dtype);
  header.op = static_cast<std::uint8_t>(op);
  const std::size_t n = std::min(algorithm.size(), header.algorithm.size() - 1);
  std::memcpy(header.algorithm.data(), algorithm.data(), n);
  return header;
}

// The first difference between two ranks' headers, as "<what> <a> but rank <j> <what> <b>".
std::string header_difference(const WireHeader& mine, int my_rank, const WireHeader& theirs,
                              int their_rank) {
  auto differ = [&](std::string_view what, const auto& a, const auto& b) {
    return fmt::format("rank {} called it with {} {} but rank {} with {} {}", their_rank, what, b,
                       my_rank, what, a);
  };
  if (mine.kind != theirs.kind) {
    return fmt::format("rank {} called {} but rank {} called {}", their_rank,
                       kind_name(static_cast<Kind>(theirs.kind)), my_rank,
                       kind_name(static_cast<Kind>(mine.kind)));
  }
  if (mine.count != theirs.count) return differ("count", mine.count, theirs.count);
  if (mine.dtype != theirs.dtype) {
    return differ("dtype", dtype_name(static_cast<DType>(mine.dtype)),
                  dtype_name(static_cast<DType>(theirs.dtype)));
  }
  if (mine.op != theirs.op) {
    return differ("op", reduce_op_name(static_cast<ReduceOp>(mine.op)),
                  reduce_op_name(static_cast<ReduceOp>(theirs.op)));
  }
  if (mine.root != theirs.root) return differ("root", mine.root, theirs.root);
  if (mine.algorithm != theirs.algorithm) {
    return differ("algorithm", std::string(mine.algorithm.data()),
                  std::string(theirs.algorithm.data()));
  }
  if (mine.tag != theirs.tag) return differ("tag", mine.tag, theirs.tag);
  if (mine.seq != theirs.seq) return differ("sequence number", mine.seq, theirs.seq);
  return "";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += fmt::format("{}{}", out.empty() ? "" : ", ", r);
  return out;
}

// Rethrows the current CommError with `prefix` in front, keeping its type.
[[noreturn]] void rethrow_with(const std::string& prefix) {
  try {
    throw;
  } catch (const CommTimeoutError& e) {
    throw CommTimeoutError(prefix + e.what());
  } catch (const CommError& e) {
    throw CommError(prefix + e.what());
  }
}

}  // namespace

std::chrono::milliseconds default_comm_timeout() {
  const std::int64_t ms = env::get_int("DTRAIN_COMM_TIMEOUT_MS", 60000);
  if (ms <= 0) {
    throw ConfigError(fmt::format(
        "DTRAIN_COMM_TIMEOUT_MS={}: the communication timeout must be a positive number of ms",
        ms));
  }
  return std::chrono::milliseconds(ms);
}

Communicator::Communicator(std::shared_ptr<Transport> transport, CommOptions options)
    : transport_(std::move(transport)), options_(std::move(options)) {
  if (!transport_) throw ConfigError("Communicator: null transport");
  if (options_.timeout.count() <= 0) {
    throw ConfigError(
        fmt::format("CommOptions.timeout = {} ms: must be positive", options_.timeout.count()));
  }
  if (options_.segment_bytes == 0) throw ConfigError("CommOptions.segment_bytes = 0: must be > 0");
  find_allreduce_algorithm(options_.allreduce_algorithm);  // fail early on a bad default
}

Communicator::~Communicator() = default;

Communicator::Call Communicator::make_call(Kind kind, const void* input, void* output,
                                           std::int64_t count, DType dtype, ReduceOp op, int root,
                                           const CollectiveOptions& options) {
  Call call;
  call.kind = kind;
  call.input = input;
  call.output = output;
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.root = root;
  call.tag = options.tag;
  call.timeout = options.timeout.count() > 0 ? options.timeout : options_.timeout;
  if (count < 0) {
    throw ShapeError(
        fmt::format("rank {}: {}: count {} is negative", rank(), kind_name(kind), count));
  }
  if (rooted(kind) && (root < 0 || root >= size())) {
    throw ConfigError(fmt::format("rank {}: {}: root {} out of range [0, {})", rank(),
                                  kind_name(kind), root, size()));
  }
  if (count > 0 && ((kind != Kind::kBarrier && output == nullptr &&
                     !(kind == Kind::kReduce && rank() != root)) ||
                    (input == nullptr && kind != Kind::kBarrier && kind != Kind::kBroadcast))) {
    throw ConfigError(
        fmt::format("rank {}: {}: null buffer for {} elements", rank(), kind_name(kind), count));
  }
  if (kind == Kind::kAllreduce) {
    const std::string& name =
        options.algorithm.empty() ? options_.allreduce_algorithm : options.algorithm;
    call.algorithm = std::string(find_allreduce_algorithm(name).name);
  } else {
    const std::string_view fixed = fixed_algorithm(kind);
    if (!options.algorithm.empty() && options.algorithm != fixed) {
      throw ConfigError(fmt::format("unknown {} algorithm '{}': expected {}", kind_name(kind),
                                    options.algorithm, fixed));
    }
    call.algorithm = std::string(fixed);
  }
  call.seq = next_seq_.fetch_add(1);
  return call;
}

std::string Communicator::describe(const Call& call) const {
  std::string what =
      fmt::format("rank {}: {} #{} ({}", rank(), kind_name(call.kind), call.seq, call.algorithm);
  if (call.kind != Kind::kBarrier) {
    what += fmt::format(", {} x {}", call.count, dtype_name(call.dtype));
  }
  if (reduces(call.kind)) what += fmt::format(", {}", reduce_op_name(call.op));
  if (rooted(call.kind)) what += fmt::format(", root {}", call.root);
  return what + "): ";
}

void Communicator::check_header(const Call& call, Clock::time_point start) {
  const int ranks = size();
  const WireHeader mine = make_header(call.kind, call.seq, call.count, call.dtype,
                                      reduces(call.kind) ? call.op : ReduceOp::kSum,
                                      rooted(call.kind) ? call.root : 0, call.tag, call.algorithm);
  Channel headers(*transport_, collective_tag(call.seq, call.tag, kPhaseHeader),
                  start + call.timeout, options_.segment_bytes);
  Channel verdicts(*transport_, collective_tag(call.seq, call.tag, kPhaseVerdict),
                   start + call.timeout, options_.segment_bytes);
  WireVerdict verdict{};
  if (rank() != kHeaderRoot) {
    headers.send(kHeaderRoot, &mine, sizeof(mine));
    try {
      verdicts.recv(kHeaderRoot, &verdict, sizeof(verdict));
    } catch (const CommTimeoutError&) {
      throw CommTimeoutError(
          fmt::format("missing rank(s): {} (it checks the arguments of every rank and did not "
                      "answer within {} ms)",
                      kHeaderRoot, call.timeout.count()));
    }
  } else {
    // The root gives up on headers at 3/4 of the timeout, so that its verdict naming the missing
    // ranks reaches the others before their own deadlines.
    const Clock::time_point header_deadline = start + call.timeout * 3 / 4;
    std::vector<WireHeader> theirs(static_cast<std::size_t>(ranks));
    std::vector<std::unique_ptr<Request>> requests(static_cast<std::size_t>(ranks));
    for (int peer = 1; peer < ranks; ++peer) {
      requests[static_cast<std::size_t>(peer)] =
          headers.irecv(peer, &theirs[static_cast<std::size_t>(peer)], sizeof(WireHeader));
    }
    std::vector<int> missing;
    std::string failure;
    for (int peer = 1; peer < ranks; ++peer) {
      try {
        requests[static_cast<std::size_t>(peer)]->wait(header_deadline);
      } catch (const CommTimeoutError&) {
        missing.push_back(peer);
        continue;
      } catch (const CommError& e) {
        if (failure.empty()) failure = e.what();
        continue;
      }
      if (failure.empty()) {
        const std::string difference =
            header_difference(mine, rank(), theirs[static_cast<std::size_t>(peer)], peer);
        if (!difference.empty()) failure = difference;
      }
    }
    requests.clear();  // cancels the receives of ranks that never arrived
    if (!missing.empty()) {
      failure =
          fmt::format("missing rank(s): {} (rank {} waited {} ms for the arguments of every rank)",
                      rank_list(missing), kHeaderRoot, call.timeout.count() * 3 / 4);
    }
    verdict.ok = failure.empty() ? kVerdictOk : (missing.empty() ? kVerdictError : kVerdictMissing);
    const std::size_t n = std::min(failure.size(), verdict.message.size() - 1);
    std::memcpy(verdict.message.data(), failure.data(), n);
    // Small messages: every send completes at once, also to ranks that never arrived. A rank
    // that has aborted cannot take its verdict; the others must still get theirs.
    for (int peer = 1; peer < ranks; ++peer) {
      try {
        verdicts.send(peer, &verdict, sizeof(verdict));
      } catch (const CommError&) {
        if (failure.empty()) throw;  // an abort the header receives did not see: report it
      }
    }
  }
  OpStats stats;
  for (const Channel* channel : {&headers, &verdicts}) {
    stats.bytes_sent += channel->traffic().bytes_sent;
    stats.bytes_received += channel->traffic().bytes_received;
    stats.messages_sent += channel->traffic().messages_sent;
    stats.messages_received += channel->traffic().messages_received;
  }
  stats.calls = 1;
  stats_.record("header_check", stats);
  if (verdict.ok == kVerdictMissing) throw CommTimeoutError(std::string(verdict.message.data()));
  if (verdict.ok != kVerdictOk) throw CommError(std::string(verdict.message.data()));
}

void Communicator::execute(const Call& call, Channel& channel) {
  const std::size_t element = dtype_size(call.dtype);
  const std::size_t bytes = static_cast<std::size_t>(call.count) * element;
  const int ranks = size();
  switch (call.kind) {
    case Kind::kBarrier: {
      std::uint8_t token = 0;
      allreduce_tree(channel, &token, 1, DType::kU8, ReduceOp::kMax);
      return;
    }
    case Kind::kBroadcast: broadcast_binomial(channel, call.output, bytes, call.root); return;
    case Kind::kAllreduce: {
      if (call.input != call.output && bytes > 0) std::memcpy(call.output, call.input, bytes);
      find_allreduce_algorithm(call.algorithm)
          .run(channel, call.output, call.count, call.dtype, call.op);
      if (call.op == ReduceOp::kAvg) divide_by(call.output, call.count, call.dtype, ranks);
      return;
    }
    case Kind::kReduce: {
      std::vector<std::byte> scratch;
      void* accumulator = call.output;
      if (rank() != call.root) {
        scratch.resize(bytes);
        accumulator = scratch.data();
      }
      if (accumulator != call.input && bytes > 0) std::memcpy(accumulator, call.input, bytes);
      reduce_binomial(channel, accumulator, call.count, call.dtype, call.op, call.root);
      if (call.op == ReduceOp::kAvg && rank() == call.root) {
        divide_by(call.output, call.count, call.dtype, ranks);
      }
      return;
    }
    case Kind::kAllgather: {
      auto* own = static_cast<std::byte*>(call.output) + static_cast<std::size_t>(rank()) * bytes;
      if (own != call.input && bytes > 0) std::memcpy(own, call.input, bytes);
      allgather_ring(channel, call.output, call.count * ranks, call.dtype);
      return;
    }
    case Kind::kReduceScatter: {
      std::vector<std::byte> scratch(bytes * static_cast<std::size_t>(ranks));
      if (!scratch.empty()) std::memcpy(scratch.data(), call.input, scratch.size());
      reduce_scatter_ring(channel, scratch.data(), call.count * ranks, call.dtype, call.op);
      if (bytes > 0) {
        std::memcpy(call.output, scratch.data() + static_cast<std::size_t>(rank()) * bytes, bytes);
      }
      if (call.op == ReduceOp::kAvg) divide_by(call.output, call.count, call.dtype, ranks);
      return;
    }
  }
  throw InternalError("Communicator::execute: unknown collective");
}

void Communicator::run(const Call& call) {
  const Clock::time_point start = Clock::now();
  Stopwatch watch;
  Channel channel(*transport_, collective_tag(call.seq, call.tag, kPhaseData), start + call.timeout,
                  options_.segment_bytes);
  try {
    if (options_.check_headers && size() > 1) check_header(call, start);
    execute(call, channel);
  } catch (const CommError&) {
    rethrow_with(describe(call));
  }
  OpStats stats;
  stats.calls = 1;
  stats.bytes_sent = channel.traffic().bytes_sent;
  stats.bytes_received = channel.traffic().bytes_received;
  stats.messages_sent = channel.traffic().messages_sent;
  stats.messages_received = channel.traffic().messages_received;
  stats.seconds = watch.seconds();
  stats_.record(kind_name(call.kind), stats);
}

Work Communicator::submit(Call call) {
  Work work(fmt::format("rank {}: {} #{}", rank(), kind_name(call.kind), call.seq));
  queue_.push([this, call = std::move(call), work] {
    try {
      run(call);
      work.finish(nullptr);
    } catch (...) {
      work.finish(std::current_exception());
    }
  });
  return work;
}

void Communicator::point_to_point(bool is_send, void* data, std::int64_t count, DType dtype,
                                  int peer, std::uint64_t tag) {
  const char* what = is_send ? "send" : "recv";
  if (count < 0)
    throw ShapeError(fmt::format("rank {}: {}: count {} is negative", rank(), what, count));
  if (peer < 0 || peer >= size()) {
    throw ConfigError(
        fmt::format("rank {}: {}: peer {} out of range [0, {})", rank(), what, peer, size()));
  }
  if (tag >= kPointToPointBit) {
    throw ConfigError(fmt::format("rank {}: {}: tag {:#x} must be below 2^63", rank(), what, tag));
  }
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  Stopwatch watch;
  Channel channel(*transport_, kPointToPointBit | tag, Clock::now() + options_.timeout,
                  options_.segment_bytes);
  try {
    if (is_send) {
      channel.send(peer, data, bytes);
    } else {
      channel.recv(peer, data, bytes);
    }
  } catch (const CommError&) {
    rethrow_with(fmt::format("rank {}: {} {} rank {} ({} x {}, tag {}): ", rank(), what,
                             is_send ? "to" : "from", peer, count, dtype_name(dtype), tag));
  }
  OpStats stats;
  stats.calls = 1;
  stats.bytes_sent = channel.traffic().bytes_sent;
  stats.bytes_received = channel.traffic().bytes_received;
  stats.messages_sent = channel.traffic().messages_sent;
  stats.messages_received = channel.traffic().messages_received;
  stats.seconds = watch.seconds();
  stats_.record(what, stats);
}

void Communicator::send(const void* data, std::int64_t count, DType dtype, int peer,
                        std::uint64_t tag) {
  point_to_point(true, const_cast<void*>(data), count, dtype, peer, tag);
}

void Communicator::recv(void* data, std::int64_t count, DType dtype, int peer, std::uint64_t tag) {
  point_to_point(false, data, count, dtype, peer, tag);
}

void Communicator::barrier(const CollectiveOptions& options) {
  run(make_call(Kind::kBarrier, nullptr, nullptr, 0, DType::kU8, ReduceOp::kMax, 0, options));
}

void Communicator::broadcast(void* data, std::int64_t count, DType dtype, int root,
                             const CollectiveOptions& options) {
  run(make_call(Kind::kBroadcast, data, data, count, dtype, ReduceOp::kSum, root, options));
}

void Communicator::allreduce(void* data, std::int64_t count, DType dtype, ReduceOp op,
                             const CollectiveOptions& options) {
  run(make_call(Kind::kAllreduce, data, data, count, dtype, op, 0, options));
}

void Communicator::allreduce(const void* input, void* output, std::int64_t count, DType dtype,
                             ReduceOp op, const CollectiveOptions& options) {
  run(make_call(Kind::kAllreduce, input, output, count, dtype, op, 0, options));
}

void Communicator::reduce(const void* input, void* output, std::int64_t count, DType dtype,
                          ReduceOp op, int root, const CollectiveOptions& options) {
  run(make_call(Kind::kReduce, input, output, count, dtype, op, root, options));
}

void Communicator::allgather(const void* input, void* output, std::int64_t count, DType dtype,
                             const CollectiveOptions& options) {
  run(make_call(Kind::kAllgather, input, output, count, dtype, ReduceOp::kSum, 0, options));
}

void Communicator::reduce_scatter(const void* input, void* output, std::int64_t count, DType dtype,
                                  ReduceOp op, const CollectiveOptions& options) {
  run(make_call(Kind::kReduceScatter, input, output, count, dtype, op, 0, options));
}

Work Communicator::barrier_async(const CollectiveOptions& options) {
  return submit(
      make_call(Kind::kBarrier, nullptr, nullptr, 0, DType::kU8, ReduceOp::kMax, 0, options));
}

Work Communicator::broadcast_async(void* data, std::int64_t count, DType dtype, int root,
                                   const CollectiveOptions& options) {
  return submit(
      make_call(Kind::kBroadcast, data, data, count, dtype, ReduceOp::kSum, root, options));
}

Work Communicator::allreduce_async(void* data, std::int64_t count, DType dtype, ReduceOp op,
                                   const CollectiveOptions& options) {
  return submit(make_call(Kind::kAllreduce, data, data, count, dtype, op, 0, options));
}

Work Communicator::allreduce_async(const void* input, void* output, std::int64_t count, DType dtype,
                                   ReduceOp op, const CollectiveOptions& options) {
  return submit(make_call(Kind::kAllreduce, input, output, count, dtype, op, 0, options));
}

Work Communicator::reduce_async(const void* input, void* output, std::int64_t count, DType dtype,
                                ReduceOp op, int root, const CollectiveOptions& options) {
  return submit(make_call(Kind::kReduce, input, output, count, dtype, op, root, options));
}

Work Communicator::allgather_async(const void* input, void* output, std::int64_t count, DType dtype,
                                   const CollectiveOptions& options) {
  return submit(
      make_call(Kind::kAllgather, input, output, count, dtype, ReduceOp::kSum, 0, options));
}

Work Communicator::reduce_scatter_async(const void* input, void* output, std::int64_t count,
                                        DType dtype, ReduceOp op,
                                        const CollectiveOptions& options) {
  return submit(make_call(Kind::kReduceScatter, input, output, count, dtype, op, 0, options));
}

}  // namespace dtrain::comm
