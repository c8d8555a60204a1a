#include "dtrain/ps/server.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>

#include "dtrain/aggregate/aggregator_spec.h"
#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/comm/comm_error.h"

namespace dtrain::ps {
namespace {

using Clock = std::chrono::steady_clock;

// Idle polling: yield the core for this long, then nap.
constexpr auto kYieldPhase = std::chrono::microseconds(500);
constexpr auto kNap = std::chrono::microseconds(50);
constexpr std::int64_t kErrorTextBytes = 1024;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

struct Server::Worker {
  enum class Held { kNone, kBspPush, kPull, kStats, kResidual };
  int rank = 0;
  std::vector<std::byte> request;
  std::unique_ptr<comm::Request> receive;
  std::vector<std::byte> reply;
  std::unique_ptr<comm::Request> send;
  std::int64_t clock = 0;  // the step this worker computes next
  bool stopped = false;
  bool dead = false;
  bool pushed_this_step = false;  // bsp
  Held held = Held::kNone;
  RequestHeader held_header;
  Clock::time_point last_heard;
  bool stall_warned = false;  // since last heard (async / ssp)
  // Counted dead for its silence (async / ssp), but perhaps alive: its requests are still
  // received, and answered with kEvicted.
  bool evicted = false;
  Clock::time_point evicted_at;
  // Checkpoints of async / ssp (protocol.h, kResidualRound): whether this worker owes its
  // error-feedback residual, and the round of the one held in `residual` (shard floats; -1: none).
  bool owes_residual = false;
  std::int64_t residual_round = -1;
  std::vector<float> residual;
};

Server::Server(comm::Transport& transport, int index, ShardLayout layout,
               std::vector<int> worker_ranks, ServerOptions options)
    : transport_(transport),
      index_(index),
      shard_(layout.shard(index)),
      options_(std::move(options)) {
  const auto workers = static_cast<std::int64_t>(worker_ranks.size());
  if (workers < 1) throw ConfigError("a parameter server needs at least one worker");
  if (options_.consistency == Consistency::kBsp &&
      (options_.backup_workers < 0 || options_.backup_workers >= workers)) {
    throw ConfigError(
        fmt::format("parameter_server.backup_workers = {} must be below the {} workers: a bsp step "
                    "needs at least "
                    "one gradient",
                    options_.backup_workers, workers));
  }
  if (options_.optimizer.name == "lars") {
    throw ConfigError(
        "optim.name = \"lars\" needs whole-tensor norms, which a parameter server's key range "
        "does not hold; use sgd, adam or adamw with parallel.strategy = \"ps\"");
  }
  // The model's tensors clipped to this shard, with offsets relative to its first key.
  std::vector<optim::Segment> segments;
  for (const auto& segment : options_.segments) {
    const std::int64_t begin = std::max(segment.offset, shard_.begin);
    const std::int64_t end = std::min(segment.offset + segment.numel, shard_.end);
    if (begin < end) {
      segments.push_back({segment.name, begin - shard_.begin, end - begin, segment.weight_decay});
    }
  }
  optimizer_ = optim::make_optimizer(options_.optimizer, std::move(segments));
  params_.assign(static_cast<std::size_t>(shard_.size()), 0.0f);
  if (options_.consistency == Consistency::kBsp) step_sum_.resize(params_.size());
  stats_.pushes.assign(static_cast<std::size_t>(workers), 0);
  stats_.dead.assign(static_cast<std::size_t>(workers), 0);
  check_compression(options_.compression, "parameter_server.compression",
                    "parameter_server.pull_compression");
  push_codec_ = compress::make_codec(options_.compression.push);
  pull_codec_ = compress::make_codec(options_.compression.pull);
  if (push_codec_ && options_.consistency != Consistency::kBsp) decoded_.resize(params_.size());
  if (pull_codec_) encoded_params_.resize(pull_codec_->encoded_bytes(shard_.size()));
  const bool gradient_attack = options_.attack != "none" && options_.attack != "labelflip";
  if (options_.aggregator != "mean" || gradient_attack) {
    if (options_.consistency != Consistency::kBsp) {
      throw ConfigError(fmt::format(
          "robust aggregation (aggregator \"{}\", attack \"{}\") combines the gradients of one "
          "step: it needs parameter_server.consistency = \"bsp\"",
          options_.aggregator, options_.attack));
    }
    if (options_.byzantine < 0 || options_.byzantine >= workers) {
      throw ConfigError(fmt::format(
          "byzantine = {} attacking workers needs 0 <= f < W = {} workers (at least one honest)",
          options_.byzantine, workers));
    }
    aggregator_ =
        aggregate::parse_aggregator(options_.aggregator, options_.byzantine, options_.seed);
    aggregator_->check_inputs(static_cast<int>(workers - options_.backup_workers));
    if (gradient_attack) {
      attack_ = aggregate::parse_attack(options_.attack, options_.seed);
      if (options_.byzantine < 1) {
        throw ConfigError(
            fmt::format("attack \"{}\" needs byzantine >= 1 attacking workers (the last f), got 0",
                        options_.attack));
      }
      if (attack_->name() == "alie") {
        aggregate::alie_z(static_cast<int>(workers), options_.byzantine);
      }
    }
    rows_.resize(static_cast<std::size_t>(workers) * params_.size());
  }
  const std::size_t request_bytes =
      sizeof(RequestHeader) +
      std::max(static_cast<std::size_t>(shard_.size()) * sizeof(float),
               push_payload_bytes(options_.compression.push, shard_.size()));
  const std::size_t reply_bytes =
      sizeof(ReplyHeader) +
      std::max({static_cast<std::size_t>(shard_.size()) * sizeof(float),
                static_cast<std::size_t>(ServerStats::encoded_size(workers)) * 8,
                static_cast<std::size_t>(kErrorTextBytes)});
  workers_.resize(static_cast<std::size_t>(workers));
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    workers_[w].rank = worker_ranks[w];
    workers_[w].request.resize(request_bytes);
    workers_[w].reply.resize(reply_bytes);
  }
}

Server::~Server() = default;

void Server::serve() {
  const auto post = [&](Worker& worker) {
    worker.receive =
        transport_.irecv(worker.rank, kRequestTag, worker.request.data(), worker.request.size());
  };
  for (auto& worker : workers_) {
    worker.last_heard = Clock::now();
    post(worker);
  }
  auto idle_since = Clock::now();
  while (!finished()) {
    bool progress = false;
    for (std::size_t w = 0; w < workers_.size(); ++w) {
      Worker& worker = workers_[w];
      if ((worker.dead && !worker.evicted) || !worker.receive ||
          !receive_arrived(static_cast<int>(w))) {
        continue;
      }
      if (worker.dead) {
        answer_evicted(static_cast<int>(w));
        post(worker);
        continue;
      }
      worker.last_heard = Clock::now();
      worker.stall_warned = false;
      handle(static_cast<int>(w));
      post(worker);
      progress = true;
    }
    if (progress) {
      release_held();
      idle_since = Clock::now();
      continue;
    }
    check_deadlines();
    if (Clock::now() - idle_since < kYieldPhase) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kNap);
    }
  }
  // The last replies must reach their workers before the server (and its buffers) goes away.
  const auto deadline = Clock::now() + options_.timeout;
  for (auto& worker : workers_) {
    if (worker.send && !worker.dead) worker.send->wait(deadline);
  }
}

bool Server::receive_arrived(int w) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  try {
    return worker.receive->test();
  } catch (const comm::CommError& e) {
    // The worker's side of the transport is gone (its thread returned or its process died).
    worker.receive.reset();
    if (worker.stopped || worker.dead) return false;
    if (options_.consistency == Consistency::kBsp && options_.backup_workers == 0) {
      fail(
          fmt::format("ps server {}: worker {} (rank {}) is gone before the end of training ({}); "
                      "bsp without backup workers cannot complete step {} without it",
                      index_, w, worker.rank, e.what(), stats_.version));
    }
    mark_dead(w, "is gone");
    return false;
  }
}

void Server::answer_evicted(int w) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  RequestHeader header;
  std::memcpy(&header, worker.request.data(), sizeof header);
  if (header.op == Op::kStop) {
    reply(w, Status::kOk);  // a worker told it is evicted may still say goodbye
    return;
  }
  // Everything else, the statistics worker 0 asks for at its end included: refused with the
  // reason (the client throws EvictedError).
  const std::string text = fmt::format(
      "ps server {}: worker {} (rank {}) was counted dead {:.1f} s ago, after it was silent for "
      "the deadline (parallel.comm_timeout_seconds); the other workers train on without it",
      index_, w, worker.rank, seconds_since(worker.evicted_at));
  reply(w, Status::kEvicted, 0, text.data(), static_cast<std::int64_t>(text.size()), 1);
}

void Server::mark_dead(int w, std::string_view why, bool listening) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  worker.dead = true;
  worker.evicted = listening;
  worker.evicted_at = Clock::now();
  if (!listening) worker.receive.reset();
  worker.held = Worker::Held::kNone;
  stats_.dead[static_cast<std::size_t>(w)] = 1;
  log::warn("ps server {}: worker {} (rank {}) {}: counted as dead, serving the others", index_, w,
            worker.rank, why);
  release_held();
}

bool Server::finished() const {
  return std::all_of(workers_.begin(), workers_.end(), [](const Worker& worker) {
    return worker.dead || (worker.stopped && worker.held == Worker::Held::kNone);
  });
}

std::int64_t Server::min_clock() const {
  std::int64_t low = std::numeric_limits<std::int64_t>::max();
  std::int64_t high = 0;
  for (const auto& worker : workers_) {
    high = std::max(high, worker.clock);
    if (!worker.stopped && !worker.dead) low = std::min(low, worker.clock);
  }
  return low == std::numeric_limits<std::int64_t>::max() ? high : low;
}

bool Server::pull_ready(std::int64_t clock) const {
  switch (options_.consistency) {
    case Consistency::kBsp: return stats_.version >= clock;
    case Consistency::kSsp: return min_clock() >= clock - options_.staleness;
    case Consistency::kAsync: return true;
  }
  return true;
}

void Server::handle(int w) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  RequestHeader header;
  std::memcpy(&header, worker.request.data(), sizeof header);
  const auto* values = reinterpret_cast<const float*>(worker.request.data() + sizeof header);
  const bool ranged = header.op == Op::kPush || header.op == Op::kPull || header.op == Op::kPut ||
                      header.op == Op::kGet || header.op == Op::kAdd ||
                      header.op == Op::kGetState || header.op == Op::kSetState;
  if (ranged &&
      (header.begin < shard_.begin || header.end < header.begin || header.end > shard_.end)) {
    fail(
        fmt::format("ps server {}: worker {} (rank {}) sent keys [{}, {}) outside this server's "
                    "shard [{}, {}): the workers and servers disagree on the model",
                    index_, w, worker.rank, header.begin, header.end, shard_.begin, shard_.end));
  }
  float* keys = params_.data() + (header.begin - shard_.begin);
  const std::int64_t n = header.end - header.begin;
  switch (header.op) {
    case Op::kPut:
      std::copy_n(values, n, keys);
      reply(w, Status::kOk);
      break;
    case Op::kAdd:
      for (std::int64_t i = 0; i < n; ++i) keys[i] += values[i];
      reply(w, Status::kOk);
      break;
    case Op::kGet: reply_params(w, Status::kOk, header, true); break;
    case Op::kPull:
      worker.clock = std::max(worker.clock, header.clock);
      if (pull_ready(header.clock)) {
        reply_params(w, Status::kOk, header, true);
      } else {
        worker.held = Worker::Held::kPull;
        worker.held_header = header;
      }
      break;
    case Op::kPush:
      ++stats_.pushes[static_cast<std::size_t>(w)];
      push(w, header, worker.request.data() + sizeof header);
      break;
    case Op::kTicket: {
      if ((header.flags & kPeekTicket) != 0) {
        reply(w, Status::kOk, next_ticket_);
        break;
      }
      next_ticket_ = std::max(next_ticket_, std::min(header.clock, options_.tickets));
      const std::int64_t ticket = next_ticket_ < options_.tickets ? next_ticket_++ : -1;
      reply(w, Status::kOk, ticket);
      break;
    }
    case Op::kGetState: get_state(w, header); break;
    case Op::kSetState: set_state(w, header, values); break;
    case Op::kGetAggregatorState: get_aggregator_state(w, header); break;
    case Op::kSetAggregatorState: set_aggregator_state(w, header, values); break;
    case Op::kResidualRound:
      // Every other live worker owes the residual it holds after its next request.
      ++residual_round_;
      for (std::size_t v = 0; v < workers_.size(); ++v) {
        Worker& other = workers_[v];
        other.owes_residual = static_cast<int>(v) != w && !other.stopped && !other.dead;
      }
      reply(w, Status::kOk);
      break;
    case Op::kPutResidual:
      if (header.begin != shard_.begin || header.end != shard_.end) {
        fail(
            fmt::format("ps server {}: worker {} sent a residual over keys [{}, {}), not its "
                        "shard [{}, {})",
                        index_, w, header.begin, header.end, shard_.begin, shard_.end));
      }
      worker.residual.assign(values, values + shard_.size());
      worker.residual_round = residual_round_;
      worker.owes_residual = false;
      reply(w, Status::kOk);
      break;
    case Op::kGetResidual:
      if (header.index < 0 || header.index >= std::ssize(workers_)) {
        reply_error(w, fmt::format("ps server {}: the residual of worker {} asked for, there are "
                                   "{} workers",
                                   index_, header.index, workers_.size()));
        break;
      }
      worker.held = Worker::Held::kResidual;
      worker.held_header = header;
      break;  // answered by release_held(), at once when it can be
    case Op::kStop:
      worker.stopped = true;
      reply(w, Status::kOk);
      break;
    case Op::kStats:  // a stop that waits for everyone's, then answers with the statistics
      worker.stopped = true;
      worker.held = Worker::Held::kStats;
      worker.held_header = header;
      break;
    default:
      fail(fmt::format("ps server {}: worker {} (rank {}) sent an unknown request {}", index_, w,
                       worker.rank, static_cast<std::uint32_t>(header.op)));
  }
}

const float* Server::decode_push(const RequestHeader& header, const std::byte* payload) {
  push_codec_->decode(reinterpret_cast<const std::uint8_t*>(payload), shard_.size(),
                      decoded_.data(), header.seed);
  return decoded_.data();
}

void Server::push(int w, const RequestHeader& header, const std::byte* payload) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  if (header.begin != shard_.begin || header.end != shard_.end) {
    fail(
        fmt::format("ps server {}: worker {} pushed keys [{}, {}), not the whole shard [{}, {}): "
                    "a push updates whole shards",
                    index_, w, header.begin, header.end, shard_.begin, shard_.end));
  }
  const bool encoded = (header.flags & kEncoded) != 0;
  if (encoded != (push_codec_ != nullptr)) {
    fail(
        fmt::format("ps server {}: worker {} (rank {}) pushed {} gradients, this server expects "
                    "{} (parameter_server.compression = \"{}\"): the workers and servers disagree",
                    index_, w, worker.rank, encoded ? "encoded" : "f32",
                    push_codec_ ? "encoded ones" : "f32", options_.compression.push.text()));
  }
  const auto* values = reinterpret_cast<const float*>(payload);
  const auto* codes = reinterpret_cast<const std::uint8_t*>(payload);
  const bool want = (header.flags & kWantParams) != 0;
  const auto n = static_cast<std::size_t>(shard_.size());
  if (options_.consistency == Consistency::kBsp) {
    const std::int64_t step = stats_.version;
    if (header.clock < step) {  // its step completed without it: counted, never applied
      ++stats_.dropped;
      worker.clock = std::max(worker.clock, header.clock + 1);
      reply_params(w, Status::kDropped, header, want);
      return;
    }
    if (header.clock > step || worker.pushed_this_step) {
      fail(
          fmt::format("ps server {}: worker {} (rank {}) pushed step {}{} while the server is at "
                      "step {} (bsp): the workers are out of step",
                      index_, w, worker.rank, header.clock,
                      worker.pushed_this_step ? " a second time" : "", step));
    }
    if (aggregator_) {
      // Robust: this worker's own mean gradient, in its row.
      float* row = rows_.data() + static_cast<std::size_t>(w) * n;
      if (encoded) {
        push_codec_->decode(codes, shard_.size(), row, header.seed);
      } else {
        std::copy_n(values, n, row);
      }
      if (header.samples > 0 && header.batch_samples > 0) {
        const auto scale = static_cast<float>(static_cast<double>(header.batch_samples) /
                                              static_cast<double>(header.samples));
        for (std::size_t i = 0; i < n; ++i) row[i] *= scale;
      }
      if (step_contributions_ == 0) {
        step_opened_ = Clock::now();
        step_samples_ = 0;
      }
    } else if (step_contributions_ == 0) {
      // Encoded: the step's sum is decode(first) + decode(second) + ..., in arrival order.
      if (encoded) {
        push_codec_->decode(codes, shard_.size(), step_sum_.data(), header.seed);
      } else {
        std::copy_n(values, n, step_sum_.begin());
      }
      step_opened_ = Clock::now();
      step_samples_ = 0;
    } else if (encoded) {
      push_codec_->decode_add(codes, shard_.size(), step_sum_.data(), header.seed);
    } else {
      for (std::size_t i = 0; i < n; ++i) step_sum_[i] += values[i];
    }
    ++step_contributions_;
    step_samples_ += header.samples;
    step_batch_samples_ = header.batch_samples;
    step_lr_ = header.lr;
    worker.pushed_this_step = true;
    worker.held = Worker::Held::kBspPush;
    worker.held_header = header;
    const auto workers = static_cast<std::int64_t>(workers_.size());
    if (step_contributions_ == workers - options_.backup_workers) complete_bsp_step();
    return;
  }
  // async / ssp: applied as it arrives.
  stats_.record(header.clock - header.basis_clock, stats_.version - header.basis_version);
  optimizer_->step(params_.data(), encoded ? decode_push(header, payload) : values, header.lr);
  ++stats_.version;
  worker.clock = std::max(worker.clock, header.clock + 1);
  if (!want) {
    reply(w, Status::kOk);
    return;
  }
  RequestHeader next = header;
  next.clock = header.clock + 1;
  if (pull_ready(next.clock)) {
    reply_params(w, Status::kOk, next, true);
  } else {
    worker.held = Worker::Held::kPull;
    worker.held_header = next;
  }
}

std::vector<float> Server::state_by_key(const optim::StateTensor& tensor) const {
  std::vector<float> out(params_.size(), 0.0f);
  std::size_t at = 0;
  for (const optim::Segment& segment : optimizer_->segments()) {
    const auto n = static_cast<std::size_t>(segment.numel);
    std::copy_n(tensor.values.begin() + static_cast<std::ptrdiff_t>(at), n,
                out.begin() + segment.offset);
    at += n;
  }
  return out;
}

void Server::get_state(int w, const RequestHeader& header) {
  const std::vector<optim::StateTensor> state = optimizer_->state();
  const auto count = static_cast<std::int64_t>(state.size());
  if (header.index < 0 || header.index >= std::max<std::int64_t>(count, 1)) {
    reply_error(w, fmt::format("ps server {}: optimizer state vector {} asked for, the optimizer "
                               "has {}: the workers and servers disagree on optim.name",
                               index_, header.index, count));
    return;
  }
  if (count == 0) {  // plain SGD keeps no state: only the update count
    reply(w, Status::kOk, 0);
    return;
  }
  const std::vector<float> by_key = state_by_key(state[static_cast<std::size_t>(header.index)]);
  reply(w, Status::kOk, count, by_key.data() + (header.begin - shard_.begin),
        header.end - header.begin, sizeof(float));
}

void Server::set_state(int w, const RequestHeader& header, const float* values) {
  std::vector<optim::StateTensor> state = optimizer_->state();
  if (header.index >= static_cast<std::int64_t>(state.size()) || header.index < -1) {
    reply_error(w, fmt::format("ps server {}: optimizer state vector {} sent, the optimizer has "
                               "{}: the checkpoint was written with another optim.name",
                               index_, header.index, state.size()));
    return;
  }
  if (header.index >= 0) {
    optim::StateTensor& tensor = state[static_cast<std::size_t>(header.index)];
    std::vector<float> by_key = state_by_key(tensor);
    std::copy_n(values, header.end - header.begin, by_key.begin() + (header.begin - shard_.begin));
    std::size_t at = 0;
    for (const optim::Segment& segment : optimizer_->segments()) {
      std::copy_n(by_key.begin() + segment.offset, segment.numel,
                  tensor.values.begin() + static_cast<std::ptrdiff_t>(at));
      at += static_cast<std::size_t>(segment.numel);
    }
  }
  try {
    optimizer_->load_state(state, header.steps);
  } catch (const Error& e) {
    reply_error(w, fmt::format("ps server {}: {}", index_, e.what()));
    return;
  }
  // bsp pairs a push with the step the server is at, so the update count continues too.
  stats_.version = header.steps;
  reply(w, Status::kOk);
}

std::vector<float> Server::aggregator_state_floats() const {
  if (!aggregator_) return {};
  const std::vector<double> state = aggregator_->state();
  std::vector<float> out(2 * state.size());
  if (!state.empty()) std::memcpy(out.data(), state.data(), state.size() * sizeof(double));
  return out;
}

void Server::get_aggregator_state(int w, const RequestHeader& header) {
  // The length request takes the snapshot the chunks then come from: with backup workers the
  // others may complete a step, and move the aggregator, between two chunk requests.
  if (header.begin == 0 && header.end == 0) outgoing_aggregator_state_ = aggregator_state_floats();
  const std::vector<float>& state = outgoing_aggregator_state_;
  const auto total = static_cast<std::int64_t>(state.size());
  const auto capacity = static_cast<std::int64_t>(
      (workers_[static_cast<std::size_t>(w)].reply.size() - sizeof(ReplyHeader)) / sizeof(float));
  if (header.begin < 0 || header.end < header.begin || header.end > total ||
      header.end - header.begin > capacity) {
    reply_error(w, fmt::format("ps server {}: aggregator state [{}, {}) asked for, it holds {} "
                               "floats (at most {} per message)",
                               index_, header.begin, header.end, total, capacity));
    return;
  }
  reply(w, Status::kOk, total, state.data() + header.begin, header.end - header.begin,
        sizeof(float));
}

void Server::set_aggregator_state(int w, const RequestHeader& header, const float* values) {
  const std::int64_t total = header.index;
  if (header.begin == 0) incoming_aggregator_state_.clear();
  if (total < 0 || header.begin != std::ssize(incoming_aggregator_state_) ||
      header.end < header.begin || header.end > total) {
    incoming_aggregator_state_.clear();
    reply_error(w, fmt::format("ps server {}: aggregator state chunk [{}, {}) of {} floats out of "
                               "order",
                               index_, header.begin, header.end, total));
    return;
  }
  incoming_aggregator_state_.insert(incoming_aggregator_state_.end(), values,
                                    values + (header.end - header.begin));
  if (header.end < total) {
    reply(w, Status::kOk, 0);
    return;
  }
  std::vector<double> state(incoming_aggregator_state_.size() / 2);
  if (!state.empty()) {
    std::memcpy(state.data(), incoming_aggregator_state_.data(), state.size() * sizeof(double));
  }
  const bool fits = aggregator_ && incoming_aggregator_state_.size() % 2 == 0 &&
                    aggregator_->state_fits(state, shard_.size());
  if (fits) aggregator_->load_state(state);
  incoming_aggregator_state_.clear();
  reply(w, Status::kOk, fits ? 1 : 0);
}

void Server::reply_error(int w, const std::string& message) {
  const std::string text = message.substr(0, static_cast<std::size_t>(kErrorTextBytes));
  reply(w, Status::kRefused, 0, text.data(), static_cast<std::int64_t>(text.size()), 1);
}

void Server::complete_bsp_step() {
  if (aggregator_) {
    aggregate_rows();
  } else if (step_samples_ > 0 && step_batch_samples_ > 0 && step_samples_ != step_batch_samples_) {
    const float scale = static_cast<float>(static_cast<double>(step_batch_samples_) /
                                           static_cast<double>(step_samples_));
    // Gradients arrive scaled so that all of them sum to the batch's mean gradient; with some
    // dropped (backup workers), the sum covers step_samples_ of step_batch_samples_ samples.
    for (float& g : step_sum_) g *= scale;
  }
  optimizer_->step(params_.data(), step_sum_.data(), step_lr_);
  ++stats_.version;
  for (std::int64_t i = 0; i < step_contributions_; ++i) stats_.record(0, 0);
  step_contributions_ = 0;
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    Worker& worker = workers_[w];
    if (worker.held != Worker::Held::kBspPush) continue;
    worker.held = Worker::Held::kNone;
    worker.pushed_this_step = false;
    worker.clock = stats_.version;
    reply_params(static_cast<int>(w), Status::kOk, worker.held_header,
                 (worker.held_header.flags & kWantParams) != 0);
  }
}

void Server::aggregate_rows() {
  const auto n = static_cast<std::int64_t>(params_.size());
  const auto row = [&](std::size_t w) { return rows_.data() + w * params_.size(); };
  // The rows of the workers that pushed this step, in worker order (not arrival order), so that
  // the aggregate does not depend on timing.
  std::vector<std::size_t> in;
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    if (workers_[w].pushed_this_step) in.push_back(w);
  }
  const std::size_t first_byzantine =
      workers_.size() - static_cast<std::size_t>(options_.byzantine);
  if (attack_) {
    std::vector<const float*> honest;
    for (std::size_t w : in) {
      if (w < first_byzantine) honest.push_back(row(w));
    }
    aggregate::AttackInput input;
    input.honest = honest;
    input.workers = static_cast<int>(workers_.size());
    input.byzantine = options_.byzantine;
    input.step = static_cast<std::uint64_t>(stats_.version);
    for (std::size_t w : in) {
      if (w < first_byzantine) continue;
      if (attack_->needs_honest() && honest.empty()) continue;  // nothing to imitate this step
      input.own = row(w);
      input.rank = static_cast<int>(w);
      attack_->apply(input, n, row(w));
    }
  }
  std::vector<const float*> inputs;
  for (std::size_t w : in) inputs.push_back(row(w));
  aggregator_->aggregate(inputs, n, step_sum_.data());
}

void Server::release_held() {
  const bool all_done = std::all_of(workers_.begin(), workers_.end(), [](const Worker& worker) {
    return worker.stopped || worker.dead;
  });
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    Worker& worker = workers_[w];
    if (worker.held == Worker::Held::kPull && pull_ready(worker.held_header.clock)) {
      worker.held = Worker::Held::kNone;
      reply_params(static_cast<int>(w), Status::kOk, worker.held_header, true);
    } else if (worker.held == Worker::Held::kResidual) {
      answer_residual(static_cast<int>(w));
    } else if (worker.held == Worker::Held::kStats && all_done) {
      worker.held = Worker::Held::kNone;
      const std::vector<std::int64_t> encoded = stats_.encode();
      reply(static_cast<int>(w), Status::kOk, 0, encoded.data(),
            static_cast<std::int64_t>(encoded.size()), sizeof(std::int64_t));
    }
  }
}

void Server::answer_residual(int w) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  Worker& owner = workers_[static_cast<std::size_t>(worker.held_header.index)];
  // A worker held by the staleness bound may be waiting for worker 0, which waits here: none.
  const bool waits =
      owner.owes_residual && !owner.stopped && !owner.dead && owner.held != Worker::Held::kPull;
  if (waits) return;
  worker.held = Worker::Held::kNone;
  owner.owes_residual = false;
  // This round's, or the one sent before the worker's stop (its last: it pushes no more).
  const bool current =
      owner.residual_round == residual_round_ || (owner.stopped && owner.residual_round >= 0);
  if (!current || owner.dead) {
    reply(w, Status::kOk);
    return;
  }
  reply(w, Status::kOk, 0, owner.residual.data(), std::ssize(owner.residual), sizeof(float));
}

void Server::check_deadlines() {
  const auto now = Clock::now();
  const bool warns =
      options_.stall_warning.count() > 0 && options_.stall_warning < options_.timeout;
  if (options_.consistency == Consistency::kBsp) {
    if (step_contributions_ == 0) return;
    const auto waited = now - step_opened_;
    const bool warn =
        warns && waited >= options_.stall_warning && stall_warned_step_ != stats_.version;
    if (waited < options_.timeout && !warn) return;
    std::vector<std::string> missing;
    for (std::size_t w = 0; w < workers_.size(); ++w) {
      if (!workers_[w].pushed_this_step) {
        missing.push_back(fmt::format("{} (rank {})", w, workers_[w].rank));
      }
    }
    if (waited < options_.timeout) {
      stall_warned_step_ = stats_.version;
      log::warn(
          "stall: ps server {} has waited {:.3g} s in bsp step {} for the gradients of worker(s) "
          "{} ({} of {} arrived; the step fails at {:.3g} s)",
          index_, seconds_since(step_opened_), stats_.version, fmt::join(missing, ", "),
          step_contributions_, workers_.size(),
          std::chrono::duration<double>(options_.timeout).count());
      return;
    }
    fail(
        fmt::format("ps server {}: bsp step {} waited {:.1f} s for the gradients of worker(s) {}; "
                    "{} of {} arrived: a worker died or is stuck (raise "
                    "parallel.comm_timeout_seconds if it is only slow)",
                    index_, stats_.version, seconds_since(step_opened_), fmt::join(missing, ", "),
                    step_contributions_, workers_.size()));
  }
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    Worker& worker = workers_[w];
    if (worker.stopped || worker.dead || worker.held != Worker::Held::kNone) continue;
    const auto silent = now - worker.last_heard;
    if (silent < options_.worker_timeout) {
      if (warns && options_.stall_warning < options_.worker_timeout && !worker.stall_warned &&
          silent >= options_.stall_warning) {
        worker.stall_warned = true;
        log::warn(
            "stall: ps server {} has heard nothing from worker {} (rank {}) for {:.3g} s (it is "
            "counted dead at {:.3g} s)",
            index_, w, worker.rank, seconds_since(worker.last_heard),
            std::chrono::duration<double>(options_.worker_timeout).count());
      }
      continue;
    }
    mark_dead(static_cast<int>(w),
              fmt::format("silent for {:.1f} s", seconds_since(worker.last_heard)),
              /*listening=*/true);
  }
}

void Server::reply(int w, Status status, std::int64_t value, const void* payload,
                   std::int64_t count, std::size_t element_bytes, std::size_t encoded_bytes) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  // One reply in flight per worker: the previous one has normally long been taken.
  if (worker.send) worker.send->wait(Clock::now() + options_.timeout);
  ReplyHeader header;
  header.status = status;
  header.flags = encoded_bytes > 0 ? kEncoded : 0;
  header.version = stats_.version;
  header.min_clock = min_clock();
  header.count = count;
  header.value = value;
  if (worker.owes_residual) header.flags |= kSendResidual;
  const std::size_t bytes =
      encoded_bytes > 0 ? encoded_bytes : static_cast<std::size_t>(count) * element_bytes;
  DTRAIN_CHECK(sizeof header + bytes <= worker.reply.size(), "reply of {} bytes", bytes);
  std::memcpy(worker.reply.data(), &header, sizeof header);
  if (bytes > 0) std::memcpy(worker.reply.data() + sizeof header, payload, bytes);
  worker.send =
      transport_.isend(worker.rank, kReplyTag, worker.reply.data(), sizeof header + bytes);
}

void Server::reply_params(int w, Status status, const RequestHeader& header, bool with_params) {
  if (!with_params) {
    reply(w, status);
    return;
  }
  const float* from = params_.data() + (header.begin - shard_.begin);
  const std::int64_t n = header.end - header.begin;
  // Training's pulls go through the pull codec; get() (evaluation, checkpoints) stays f32.
  if (pull_codec_ && header.op != Op::kGet && n > 0) {
    pull_codec_->encode(from, n, encoded_params_.data(), 0);
    reply(w, status, 0, encoded_params_.data(), n, 0, pull_codec_->encoded_bytes(n));
    return;
  }
  reply(w, status, 0, from, n, sizeof(float));
}

void Server::fail(const std::string& message) {
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    Worker& worker = workers_[w];
    if (worker.held == Worker::Held::kNone || worker.dead) continue;
    worker.held = Worker::Held::kNone;
    const std::string text = message.substr(0, static_cast<std::size_t>(kErrorTextBytes));
    try {
      reply(static_cast<int>(w), Status::kError, 0, text.data(),
            static_cast<std::int64_t>(text.size()), 1);
      worker.send->wait(Clock::now() + std::chrono::seconds(1));
    } catch (const std::exception&) {
      // The error below is what matters; a worker that cannot hear it finds out by its deadline.
    }
  }
  throw comm::CommError(message);
}

}  // namespace dtrain::ps
