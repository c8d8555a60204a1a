#include "dtrain/comm/communicator.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/base/env.h"
#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/timer.h"
#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/blocks.h"
#include "dtrain/comm/algorithms/channel.h"
#include "dtrain/comm/algorithms/cost_model.h"
#include "dtrain/comm/algorithms/neighbor_allreduce.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/transport/sub_transport.h"

namespace dtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = Communicator::Kind;

// Tag layout (64 bits; docs/COMM.md "Tags"):
//   bit 63        point-to-point flag
//   bits 47..62   communicator id: 0 in every tag built here; a sub-communicator's SubTransport
//                 puts the id agreed at split time there (transport/sub_transport.h), so the
//                 traffic of a parent, its children and their siblings never matches
//   collectives:  bits 24..46 sequence number (mod 2^23: only calls in flight at the same time
//                 must differ), bits 8..23 the caller's tag, bits 0..7 the phase
//   point-to-point: bits 0..46 the caller's tag
constexpr std::uint64_t kPointToPointBit = std::uint64_t{1} << 63;
constexpr std::uint64_t kPointToPointTagLimit = std::uint64_t{1} << kCommunicatorIdShift;
constexpr int kSeqShift = 24;
constexpr std::uint64_t kSeqMask = (std::uint64_t{1} << (kCommunicatorIdShift - kSeqShift)) - 1;
constexpr std::uint64_t kPhaseData = 0;
constexpr std::uint64_t kPhaseHeader = 1;
constexpr std::uint64_t kPhaseVerdict = 2;
constexpr std::uint64_t kPhaseProbe = 3;  // auto's alpha-beta measurement
constexpr int kHeaderRoot = 0;
// Ids a communicator reserves for itself: its own and its hierarchical allreduce's two levels.
constexpr std::uint64_t kIdsPerCommunicator = 3;

std::uint64_t collective_tag(std::uint64_t seq, std::uint16_t tag, std::uint64_t phase) {
  return ((seq & kSeqMask) << kSeqShift) | (std::uint64_t{tag} << 8) | phase;
}
static_assert((kSeqMask << kSeqShift & kCommunicatorIdMask) == 0);

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::kBarrier: return "barrier";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kAllreduce: return "allreduce";
    case Kind::kReduce: return "reduce";
    case Kind::kAllgather: return "allgather";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kScatter: return "scatter";
    case Kind::kGather: return "gather";
    case Kind::kAlltoall: return "alltoall";
    case Kind::kSplit: return "split";
    case Kind::kReduceScatterBlocks: return "reduce_scatter_blocks";
    case Kind::kAllgatherBlocks: return "allgather_blocks";
    case Kind::kNeighborAllreduce: return "neighbor_allreduce";
  }
  return "?";
}

// The one algorithm of each non-allreduce collective.
std::string_view fixed_algorithm(Kind kind) {
  switch (kind) {
    case Kind::kBarrier:
    case Kind::kBroadcast:
    case Kind::kReduce:
    case Kind::kScatter:
    case Kind::kGather: return "binomial";
    case Kind::kAllgather:
    case Kind::kReduceScatter:
    case Kind::kReduceScatterBlocks:
    case Kind::kAllgatherBlocks:
    case Kind::kSplit: return "ring";
    case Kind::kAlltoall: return "pairwise";
    case Kind::kAllreduce:
    case Kind::kNeighborAllreduce: break;  // chosen per call: the algorithm, the topology
  }
  return "";
}

bool reduces(Kind kind) {
  return kind == Kind::kAllreduce || kind == Kind::kReduce || kind == Kind::kReduceScatter ||
         kind == Kind::kReduceScatterBlocks;
}
bool rooted(Kind kind) {
  return kind == Kind::kBroadcast || kind == Kind::kReduce || kind == Kind::kScatter ||
         kind == Kind::kGather;
}

// Whether this rank reads `input` / writes `output` in a collective with `count` > 0.
bool reads_input(Kind kind, bool is_root) {
  switch (kind) {
    case Kind::kBarrier:
    case Kind::kBroadcast: return false;
    case Kind::kScatter: return is_root;
    default: return true;
  }
}
bool writes_output(Kind kind, bool is_root) {
  switch (kind) {
    case Kind::kBarrier: return false;
    case Kind::kReduce:
    case Kind::kGather: return is_root;
    default: return true;
  }
}

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

// What a deadline error ends with: the deadline and the setting that raises it.
constexpr std::string_view kDeadlineAdvice = "; the deadline is ";

std::string deadline_advice(std::chrono::milliseconds timeout, const std::string& setting) {
  return fmt::format("{}{:.3g} s: a rank died or is stuck (raise {} if it is only slow)",
                     kDeadlineAdvice, std::chrono::duration<double>(timeout).count(), setting);
}

// Rethrows the current CommError with `prefix` in front, keeping its type; a deadline's error
// also with deadline_advice(timeout, setting) after it (once: an error that has it keeps it).
[[noreturn]] void rethrow_with(const std::string& prefix, std::chrono::milliseconds timeout,
                               const std::string& setting) {
  try {
    throw;
  } catch (const CommTimeoutError& e) {
    const std::string_view what = e.what();
    throw CommTimeoutError(prefix + std::string(what) +
                           (what.find(kDeadlineAdvice) == std::string_view::npos
                                ? deadline_advice(timeout, setting)
                                : std::string()));
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

// The two levels of the hierarchical allreduce (allreduce_hierarchical.cc), built once from
// rank, size and CommOptions::local_size without any communication: each group of local_size
// consecutive ranks is a sub-transport with this communicator's id + 1 (groups are disjoint, so
// they may share it), the group leaders (first rank of each group) one with id + 2.
struct Communicator::Hierarchy {
  std::shared_ptr<Transport> local;
  std::shared_ptr<Transport> leaders;  // null off the leaders
};

// What the auto allreduce chooses by (algorithms/cost_model.h): given in CommOptions, or measured
// by the first auto call (`claimed` picks it in sequence order, so it is the same call at every
// rank) while later auto calls on other threads wait for it.
struct Communicator::AutoModel {
  std::atomic<bool> claimed{false};
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::string failure;  // the probe's error; later calls report it
  AlphaBeta model;
  std::set<std::string, std::less<>> logged;  // choices already logged
  // The last choice, so that a run of equal calls (a training loop's buckets, a benchmark) skips
  // the model, the lock and the log check: bytes << 8 | (1 + index into
  // auto_allreduce_candidates()); 0 = none yet. Written only once the model is ready.
  std::atomic<std::uint64_t> last_choice{0};
};

Communicator::Communicator(std::shared_ptr<Transport> transport, CommOptions options)
    : transport_(std::move(transport)),
      options_(std::move(options)),
      auto_(std::make_unique<AutoModel>()) {
  if (!transport_) throw ConfigError("Communicator: null transport");
  if (options_.timeout.count() <= 0) {
    throw ConfigError(
        fmt::format("CommOptions.timeout = {} ms: must be positive", options_.timeout.count()));
  }
  if (options_.segment_bytes == 0) throw ConfigError("CommOptions.segment_bytes = 0: must be > 0");
  if (options_.local_size < 0) {
    throw ConfigError(fmt::format(
        "CommOptions.local_size = {}: must be >= 0 (0: the whole communicator is one group)",
        options_.local_size));
  }
  if (options_.alpha_us < 0 || options_.beta_us_per_byte < 0 ||
      (options_.alpha_us > 0) != (options_.beta_us_per_byte > 0)) {
    throw ConfigError(fmt::format(
        "CommOptions.alpha_us = {}, beta_us_per_byte = {}: give both (> 0) or neither (0: "
        "measured at the first auto allreduce)",
        options_.alpha_us, options_.beta_us_per_byte));
  }
  find_allreduce_algorithm(options_.allreduce_algorithm);  // fail early on a bad default
  label_ = fmt::format("rank {}", rank());
  if (const auto* view = dynamic_cast<const SubTransport*>(transport_.get())) {
    id_ = view->id();
    label_ = fmt::format("rank {} of communicator {} (world rank {})", rank(), id_,
                         view->world_rank(rank()));
  }
  next_id_ = std::make_shared<std::atomic<std::uint64_t>>(id_ + kIdsPerCommunicator);
  if (options_.alpha_us > 0) {
    auto_->claimed = true;
    auto_->ready = true;
    auto_->model.alpha = options_.alpha_us * 1e-6;
    auto_->model.beta = options_.beta_us_per_byte * 1e-6;
  }
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
  call.check_header = options.check_header;
  call.timeout = options.timeout.count() > 0 ? options.timeout : options_.timeout;
  if (count < 0) {
    throw ShapeError(
        fmt::format("rank {}: {}: count {} is negative", rank(), kind_name(kind), count));
  }
  if (rooted(kind) && (root < 0 || root >= size())) {
    throw ConfigError(fmt::format("rank {}: {}: root {} out of range [0, {})", rank(),
                                  kind_name(kind), root, size()));
  }
  const bool is_root = rank() == root;
  if (count > 0 && ((writes_output(kind, is_root) && output == nullptr) ||
                    (reads_input(kind, is_root) && input == nullptr))) {
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
  // The first auto call in sequence order that has work to do measures the model: the same call
  // at every rank (the header check makes counts agree).
  if (call.algorithm == kAutoAllreduce && size() > 1 && count > 0) {
    call.probe = !auto_->claimed.exchange(true);
  }
  return call;
}

std::string Communicator::call_name(const Call& call) const {
  std::string what = fmt::format("{} #{} ({}", kind_name(call.kind), call.seq, call.algorithm);
  if (call.kind != Kind::kBarrier) {
    what += fmt::format(", {} x {}", call.count, dtype_name(call.dtype));
  }
  if (reduces(call.kind)) what += fmt::format(", {}", reduce_op_name(call.op));
  if (rooted(call.kind)) what += fmt::format(", root {}", call.root);
  return what + ")";
}

std::string Communicator::describe(const Call& call) const {
  return fmt::format("{}: {}: ", label_, call_name(call));
}

std::optional<StallWatch> Communicator::stall_watch(Clock::time_point start,
                                                    std::chrono::milliseconds timeout,
                                                    std::function<std::string()> what) const {
  if (options_.stall_warning.count() <= 0 || options_.stall_warning >= timeout) return std::nullopt;
  StallWatch watch;
  watch.start = start;
  watch.at = start + options_.stall_warning;
  watch.timeout = timeout;
  watch.label = label_;
  watch.what = std::move(what);
  return watch;
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
    // Stall inspector: a first, shorter wait; the ranks still absent then are named in a warning,
    // and the wait goes on to header_deadline.
    const Clock::time_point stall_at = start + options_.stall_warning;
    if (options_.stall_warning.count() > 0 && stall_at < header_deadline) {
      std::vector<int> late;
      for (int peer = 1; peer < ranks; ++peer) {
        auto& request = requests[static_cast<std::size_t>(peer)];
        try {
          if (!request->test()) {
            if (Clock::now() < stall_at) request->wait(stall_at);
          }
        } catch (const CommTimeoutError&) {
          late.push_back(peer);
        } catch (const CommError&) {
          // Reported by the full wait below.
        }
      }
      if (!late.empty()) {
        log::warn(
            "stall: {}rank(s) {} have not arrived after {:.3g} s (the call fails at {:.3g} s if "
            "they never do)",
            describe(call), rank_list(late),
            std::chrono::duration<double>(options_.stall_warning).count(),
            std::chrono::duration<double>(call.timeout).count());
      }
    }
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

void Communicator::execute(const Call& call, Channel& channel, Traffic& extra) {
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
      run_allreduce(call, channel, extra);
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
    case Kind::kScatter:
      scatter_binomial(channel, call.input, call.output, bytes, call.root);
      return;
    case Kind::kGather: gather_binomial(channel, call.input, call.output, bytes, call.root); return;
    case Kind::kAlltoall: alltoall_pairwise(channel, call.input, call.output, bytes); return;
    case Kind::kSplit:
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
    case Kind::kReduceScatterBlocks: {
      reduce_scatter_ring(channel, call.output, call.count, call.dtype, call.op);
      if (call.op == ReduceOp::kAvg) {
        const std::int64_t begin = block_begin(call.count, ranks, rank());
        divide_by(static_cast<std::byte*>(call.output) + static_cast<std::size_t>(begin) * element,
                  block_size(call.count, ranks, rank()), call.dtype, ranks);
      }
      return;
    }
    case Kind::kAllgatherBlocks:
      allgather_ring(channel, call.output, call.count, call.dtype);
      return;
    case Kind::kNeighborAllreduce:
      comm::neighbor_allreduce(channel, call.input, call.output, call.count, call.dtype,
                               call.in_neighbors, call.out_neighbors);
      return;
  }
  throw InternalError("Communicator::execute: unknown collective");
}

void Communicator::run_allreduce(const Call& call, Channel& channel, Traffic& extra) {
  const AllreduceAlgorithm& algorithm = find_allreduce_algorithm(call.algorithm);
  if (algorithm.name == kHierarchicalAllreduce) {
    if (size() == 1 || call.count == 0) return;
    const Hierarchy& levels = hierarchy();
    // The sub-transports fold their own ids into the tag: the parent's data tag is safe to reuse.
    Channel local(*levels.local, collective_tag(call.seq, call.tag, kPhaseData), channel.deadline(),
                  options_.segment_bytes);
    local.set_stall_watch(channel.stall_watch());
    std::optional<Channel> leaders;
    if (levels.leaders) {
      leaders.emplace(*levels.leaders, collective_tag(call.seq, call.tag, kPhaseData),
                      channel.deadline(), options_.segment_bytes);
      leaders->set_stall_watch(channel.stall_watch());
    }
    auto add = [&](const Channel& used) {
      extra.bytes_sent += used.traffic().bytes_sent;
      extra.bytes_received += used.traffic().bytes_received;
      extra.messages_sent += used.traffic().messages_sent;
      extra.messages_received += used.traffic().messages_received;
    };
    try {
      allreduce_hierarchical(local, leaders ? &*leaders : nullptr, call.output, call.count,
                             call.dtype, call.op);
    } catch (...) {
      add(local);
      if (leaders) add(*leaders);
      throw;
    }
    add(local);
    if (leaders) add(*leaders);
    return;
  }
  if (algorithm.name == kAutoAllreduce) {
    if (size() == 1 || call.count == 0) return;
    const auto exact_bytes = static_cast<std::uint64_t>(call.count) * dtype_size(call.dtype);
    const auto candidates = auto_allreduce_candidates();
    const std::uint64_t cached = auto_->last_choice.load(std::memory_order_acquire);
    if (!call.probe && cached != 0 && cached >> 8 == exact_bytes) {
      find_allreduce_algorithm(candidates[(cached & 0xff) - 1])
          .run(channel, call.output, call.count, call.dtype, call.op);
      return;
    }
    const AlphaBeta model = auto_model(call, channel.deadline() - call.timeout);
    const auto bytes = static_cast<double>(exact_bytes);
    const std::string_view chosen = choose_allreduce(size(), bytes, model, options_.segment_bytes);
    for (std::size_t k = 0; k < candidates.size(); ++k) {
      if (candidates[k] == chosen && exact_bytes < (std::uint64_t{1} << 56)) {
        auto_->last_choice.store(exact_bytes << 8 | (k + 1), std::memory_order_release);
      }
    }
    {
      std::lock_guard<std::mutex> lock(auto_->mu);
      // Rank 0 speaks for all: every rank makes the same choice.
      if (auto_->logged.insert(std::string(chosen)).second && rank() == 0) {
        log::info(
            "allreduce auto: '{}' for {} bytes on {} ranks (alpha-beta model: alpha {:.3g} us, "
            "beta {:.3g} ns/byte)",
            chosen, bytes, size(), model.alpha * 1e6, model.beta * 1e9);
      }
    }
    find_allreduce_algorithm(chosen).run(channel, call.output, call.count, call.dtype, call.op);
    return;
  }
  algorithm.run(channel, call.output, call.count, call.dtype, call.op);
}

const Communicator::Hierarchy& Communicator::hierarchy() {
  std::lock_guard<std::mutex> lock(hierarchy_mu_);
  if (hierarchy_) return *hierarchy_;
  const int ranks = size();
  const int group =
      options_.local_size == 0 || options_.local_size >= ranks ? ranks : options_.local_size;
  const int first = rank() / group * group;
  std::vector<int> local;
  for (int r = first; r < std::min(ranks, first + group); ++r) local.push_back(r);
  auto levels = std::make_unique<Hierarchy>();
  levels->local = SubTransport::create(transport_, local, id_ + 1);
  if (rank() == first) {
    std::vector<int> leaders;
    for (int r = 0; r < ranks; r += group) leaders.push_back(r);
    levels->leaders = SubTransport::create(transport_, leaders, id_ + 2);
  }
  hierarchy_ = std::move(levels);
  return *hierarchy_;
}

AlphaBeta Communicator::auto_model(const Call& call, Clock::time_point start) {
  AutoModel& state = *auto_;
  if (call.probe) {
    Channel probe(*transport_, collective_tag(call.seq, call.tag, kPhaseProbe),
                  start + call.timeout, options_.segment_bytes);
    Stopwatch watch;
    AlphaBeta model;
    try {
      model = measure_alpha_beta(probe);
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(state.mu);
        state.failure = e.what();
      }
      state.cv.notify_all();
      throw;
    }
    OpStats stats;
    stats.calls = 1;
    stats.bytes_sent = probe.traffic().bytes_sent;
    stats.bytes_received = probe.traffic().bytes_received;
    stats.messages_sent = probe.traffic().messages_sent;
    stats.messages_received = probe.traffic().messages_received;
    stats.seconds = watch.seconds();
    stats_.record("alpha_beta_probe", stats);
    {
      std::lock_guard<std::mutex> lock(state.mu);
      state.model = model;
      state.ready = true;
    }
    state.cv.notify_all();
    if (rank() == 0) {
      log::info(
          "allreduce auto: measured alpha {:.3g} us, beta {:.3g} ns/byte ({:.2f} GB/s) in {:.1f} "
          "ms",
          model.alpha * 1e6, model.beta * 1e9, 1e-9 / model.beta, watch.seconds() * 1e3);
    }
    return model;
  }
  std::unique_lock<std::mutex> lock(state.mu);
  if (!state.cv.wait_until(lock, start + call.timeout,
                           [&] { return state.ready || !state.failure.empty(); })) {
    throw CommTimeoutError(
        fmt::format("waited {} ms for the alpha-beta measurement of the first auto allreduce",
                    call.timeout.count()));
  }
  if (!state.ready) {
    throw CommError("the alpha-beta measurement of the first auto allreduce failed: " +
                    state.failure);
  }
  return state.model;
}

void Communicator::run(const Call& call) {
  const Clock::time_point start = Clock::now();
  Stopwatch watch;
  Channel channel(*transport_, collective_tag(call.seq, call.tag, kPhaseData), start + call.timeout,
                  options_.segment_bytes);
  // Every wait of the call's data phase warns once past the stall threshold, naming its peer (the
  // header check has its own inspector at rank 0, which names every late rank at once).
  std::optional<StallWatch> stall =
      stall_watch(start, call.timeout, [this, &call] { return call_name(call); });
  if (stall) channel.set_stall_watch(&*stall);
  Traffic extra;
  try {
    if (options_.check_headers && call.check_header && size() > 1) check_header(call, start);
    execute(call, channel, extra);
  } catch (const CommError&) {
    rethrow_with(describe(call), call.timeout, options_.timeout_setting);
  }
  OpStats stats;
  stats.calls = 1;
  stats.bytes_sent = channel.traffic().bytes_sent + extra.bytes_sent;
  stats.bytes_received = channel.traffic().bytes_received + extra.bytes_received;
  stats.messages_sent = channel.traffic().messages_sent + extra.messages_sent;
  stats.messages_received = channel.traffic().messages_received + extra.messages_received;
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

void Communicator::check_point_to_point(const char* what, std::int64_t count, int peer,
                                        std::uint64_t tag) const {
  if (count < 0)
    throw ShapeError(fmt::format("rank {}: {}: count {} is negative", rank(), what, count));
  if (peer < 0 || peer >= size()) {
    throw ConfigError(
        fmt::format("rank {}: {}: peer {} out of range [0, {})", rank(), what, peer, size()));
  }
  if (tag >= kPointToPointTagLimit) {
    throw ConfigError(fmt::format("rank {}: {}: tag {:#x} must be below 2^{}", rank(), what, tag,
                                  kCommunicatorIdShift));
  }
}

void Communicator::point_to_point(bool is_send, void* data, std::int64_t count, DType dtype,
                                  int peer, std::uint64_t tag) {
  const char* what = is_send ? "send" : "recv";
  check_point_to_point(what, count, peer, tag);
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  Stopwatch watch;
  const Clock::time_point start = Clock::now();
  Channel channel(*transport_, kPointToPointBit | tag, start + options_.timeout,
                  options_.segment_bytes);
  std::optional<StallWatch> stall = stall_watch(start, options_.timeout, [&] {
    return fmt::format("{} {} rank {} ({} x {}, tag {})", what, is_send ? "to" : "from", peer,
                       count, dtype_name(dtype), tag);
  });
  if (stall) channel.set_stall_watch(&*stall);
  try {
    if (is_send) {
      channel.send(peer, data, bytes);
    } else {
      channel.recv(peer, data, bytes);
    }
  } catch (const CommError&) {
    rethrow_with(fmt::format("rank {}: {} {} rank {} ({} x {}, tag {}): ", rank(), what,
                             is_send ? "to" : "from", peer, count, dtype_name(dtype), tag),
                 options_.timeout, options_.timeout_setting);
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

PendingMessage Communicator::post_point_to_point(bool is_send, void* data, std::int64_t count,
                                                 DType dtype, int peer, std::uint64_t tag) {
  const char* what = is_send ? "isend" : "irecv";
  check_point_to_point(what, count, peer, tag);
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  PendingMessage message;
  message.comm_ = this;
  message.posted_ = Clock::now();
  message.deadline_ = message.posted_ + options_.timeout;
  message.is_send_ = is_send;
  message.peer_ = peer;
  message.count_ = count;
  message.dtype_ = dtype;
  message.tag_ = tag;
  // The tag blocking send/recv use (point_to_point's Channel), so the two kinds match each other.
  message.request_ = is_send ? transport_->isend(peer, kPointToPointBit | tag, data, bytes)
                             : transport_->irecv(peer, kPointToPointBit | tag, data, bytes);
  return message;
}

PendingMessage Communicator::isend(const void* data, std::int64_t count, DType dtype, int peer,
                                   std::uint64_t tag) {
  return post_point_to_point(true, const_cast<void*>(data), count, dtype, peer, tag);
}

PendingMessage Communicator::irecv(void* data, std::int64_t count, DType dtype, int peer,
                                   std::uint64_t tag) {
  return post_point_to_point(false, data, count, dtype, peer, tag);
}

void PendingMessage::wait() {
  if (request_ == nullptr) return;
  const std::unique_ptr<Request> request = std::move(request_);
  try {
    const std::chrono::milliseconds stall = comm_->options().stall_warning;
    const Clock::time_point stall_at = posted_ + stall;
    bool waited = false;
    if (stall.count() > 0 && stall_at < deadline_) {
      try {
        request->wait(stall_at);
        waited = true;
      } catch (const CommTimeoutError&) {
        log::warn(
            "stall: {} has waited {:.3g} s in {} {} rank {} ({} x {}, tag {}) (the call fails at "
            "{:.3g} s)",
            comm_->label_, std::chrono::duration<double>(Clock::now() - posted_).count(),
            is_send_ ? "isend" : "irecv", is_send_ ? "to" : "from", peer_, count_,
            dtype_name(dtype_), tag_, std::chrono::duration<double>(deadline_ - posted_).count());
      }
    }
    if (!waited) request->wait(deadline_);
  } catch (const CommError&) {
    rethrow_with(fmt::format("rank {}: {} {} rank {} ({} x {}, tag {}): ", comm_->rank(),
                             is_send_ ? "isend" : "irecv", is_send_ ? "to" : "from", peer_, count_,
                             dtype_name(dtype_), tag_),
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - posted_),
                 comm_->options().timeout_setting);
  }
  const auto bytes =
      static_cast<std::int64_t>(static_cast<std::size_t>(count_) * dtype_size(dtype_));
  OpStats stats;
  stats.calls = 1;
  (is_send_ ? stats.bytes_sent : stats.bytes_received) = bytes;
  (is_send_ ? stats.messages_sent : stats.messages_received) = 1;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - posted_).count();
  comm_->stats().record(is_send_ ? "send" : "recv", stats);
}

void Communicator::send(const void* data, std::int64_t count, DType dtype, int peer,
                        std::uint64_t tag) {
  point_to_point(true, const_cast<void*>(data), count, dtype, peer, tag);
}

void Communicator::recv(void* data, std::int64_t count, DType dtype, int peer, std::uint64_t tag) {
  point_to_point(false, data, count, dtype, peer, tag);
}

std::vector<const void*> Communicator::exchange_addresses(const void* address,
                                                          std::shared_ptr<const void> storage) {
  if (!shares_memory()) {
    throw InternalError(fmt::format(
        "Communicator::exchange_addresses over the {} transport, whose ranks do not share memory",
        transport_->name()));
  }
  transport_->keep_alive(std::move(storage));
  const auto mine = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(address));
  std::vector<std::int64_t> all(static_cast<std::size_t>(size()));
  allgather(&mine, all.data(), 1, DType::kI64);
  std::vector<const void*> addresses;
  addresses.reserve(all.size());
  for (const std::int64_t a : all) {
    addresses.push_back(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(a)));
  }
  return addresses;
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

void Communicator::reduce_scatter_blocks(void* data, std::int64_t count, DType dtype, ReduceOp op,
                                         const CollectiveOptions& options) {
  run(make_call(Kind::kReduceScatterBlocks, data, data, count, dtype, op, 0, options));
}

void Communicator::allgather_blocks(void* data, std::int64_t count, DType dtype,
                                    const CollectiveOptions& options) {
  run(make_call(Kind::kAllgatherBlocks, data, data, count, dtype, ReduceOp::kSum, 0, options));
}

void Communicator::scatter(const void* input, void* output, std::int64_t count, DType dtype,
                           int root, const CollectiveOptions& options) {
  run(make_call(Kind::kScatter, input, output, count, dtype, ReduceOp::kSum, root, options));
}

void Communicator::gather(const void* input, void* output, std::int64_t count, DType dtype,
                          int root, const CollectiveOptions& options) {
  run(make_call(Kind::kGather, input, output, count, dtype, ReduceOp::kSum, root, options));
}

void Communicator::alltoall(const void* input, void* output, std::int64_t count, DType dtype,
                            const CollectiveOptions& options) {
  run(make_call(Kind::kAlltoall, input, output, count, dtype, ReduceOp::kSum, 0, options));
}

Communicator::Call Communicator::make_neighbor_call(const void* input, void* output,
                                                    std::int64_t count, DType dtype,
                                                    const Topology& topology, std::int64_t step,
                                                    const CollectiveOptions& options) {
  if (!options.algorithm.empty()) {
    throw ConfigError(fmt::format(
        "rank {}: neighbor_allreduce: algorithm '{}': its topology is its algorithm; leave the "
        "algorithm empty",
        rank(), options.algorithm));
  }
  if (topology.size() != size()) {
    throw ConfigError(
        fmt::format("rank {}: neighbor_allreduce: topology '{}' is for {} ranks, the "
                    "communicator has {}",
                    rank(), topology.name(), topology.size(), size()));
  }
  if (dtype != DType::kF32 && dtype != DType::kF64) {
    throw ConfigError(fmt::format(
        "rank {}: neighbor_allreduce: dtype {} is not supported: f32 or f64 (a weighted average)",
        rank(), dtype_name(dtype)));
  }
  if (step < 0) {
    throw ConfigError(
        fmt::format("rank {}: neighbor_allreduce: step {} is negative", rank(), step));
  }
  Call call =
      make_call(Kind::kNeighborAllreduce, input, output, count, dtype, ReduceOp::kSum, 0, options);
  // What the header check compares across ranks; the step only where W depends on it.
  call.algorithm = topology.time_varying() ? fmt::format("{} step {}", topology.name(), step)
                                           : std::string(topology.name());
  call.in_neighbors = topology.in_neighbors(rank(), step);
  call.out_neighbors = topology.out_neighbors(rank(), step);
  return call;
}

void Communicator::neighbor_allreduce(const void* input, void* output, std::int64_t count,
                                      DType dtype, const Topology& topology, std::int64_t step,
                                      const CollectiveOptions& options) {
  run(make_neighbor_call(input, output, count, dtype, topology, step, options));
}

Work Communicator::neighbor_allreduce_async(const void* input, void* output, std::int64_t count,
                                            DType dtype, const Topology& topology,
                                            std::int64_t step, const CollectiveOptions& options) {
  return submit(make_neighbor_call(input, output, count, dtype, topology, step, options));
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  return split(color, key, options_);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, CommOptions options) {
  // Every rank contributes (color, key, the smallest id it may hand out); the new id is the
  // largest of those over all ranks here. A communicator that shares a rank s with an older one
  // was created after s raised its next id above the older one's ids, so ids of communicators that
  // share a rank always differ; siblings of one split share the id but no rank.
  constexpr std::int64_t kFields = 3;
  const std::array<std::int64_t, kFields> mine{color < 0 ? kUndefinedColor : color, key,
                                               static_cast<std::int64_t>(next_id_->load())};
  std::vector<std::int64_t> table(static_cast<std::size_t>(kFields * size()));
  run(make_call(Kind::kSplit, mine.data(), table.data(), kFields, DType::kI64, ReduceOp::kSum, 0,
                {}));
  std::uint64_t id = 0;
  std::vector<std::pair<std::int64_t, int>> members;  // (key, rank here) of my color
  for (int r = 0; r < size(); ++r) {
    const std::int64_t* row = table.data() + kFields * r;
    id = std::max(id, static_cast<std::uint64_t>(row[2]));
    if (row[0] >= 0 && row[0] == mine[0]) members.emplace_back(row[1], r);
  }
  if (id + kIdsPerCommunicator - 1 > kMaxCommunicatorId) {
    throw ConfigError(
        fmt::format("rank {}: split: communicator ids exhausted ({} of {} used): create fewer "
                    "sub-communicators",
                    rank(), id, kMaxCommunicatorId));
  }
  std::uint64_t seen = next_id_->load();
  while (seen < id + kIdsPerCommunicator &&
         !next_id_->compare_exchange_weak(seen, id + kIdsPerCommunicator)) {
  }
  if (color < 0) return nullptr;
  std::sort(members.begin(), members.end());
  std::vector<int> ranks;
  for (const auto& member : members) ranks.push_back(member.second);
  auto child = std::make_unique<Communicator>(SubTransport::create(transport_, ranks, id),
                                              std::move(options));
  child->next_id_ = next_id_;
  return child;
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

Work Communicator::scatter_async(const void* input, void* output, std::int64_t count, DType dtype,
                                 int root, const CollectiveOptions& options) {
  return submit(
      make_call(Kind::kScatter, input, output, count, dtype, ReduceOp::kSum, root, options));
}

Work Communicator::gather_async(const void* input, void* output, std::int64_t count, DType dtype,
                                int root, const CollectiveOptions& options) {
  return submit(
      make_call(Kind::kGather, input, output, count, dtype, ReduceOp::kSum, root, options));
}

Work Communicator::alltoall_async(const void* input, void* output, std::int64_t count, DType dtype,
                                  const CollectiveOptions& options) {
  return submit(
      make_call(Kind::kAlltoall, input, output, count, dtype, ReduceOp::kSum, 0, options));
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

Work Communicator::reduce_scatter_blocks_async(void* data, std::int64_t count, DType dtype,
                                               ReduceOp op, const CollectiveOptions& options) {
  return submit(make_call(Kind::kReduceScatterBlocks, data, data, count, dtype, op, 0, options));
}

Work Communicator::allgather_blocks_async(void* data, std::int64_t count, DType dtype,
                                          const CollectiveOptions& options) {
  return submit(
      make_call(Kind::kAllgatherBlocks, data, data, count, dtype, ReduceOp::kSum, 0, options));
}

}  // namespace dtrain::comm
