#include "dtrain/ps/client.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <string>

#include "dtrain/base/error.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/stall_watch.h"

namespace dtrain::ps {
namespace {

using Clock = std::chrono::steady_clock;

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kPush: return "push";
    case Op::kPull: return "pull";
    case Op::kPut: return "put";
    case Op::kGet: return "get";
    case Op::kAdd: return "add";
    case Op::kTicket: return "ticket";
    case Op::kStop: return "stop";
    case Op::kStats: return "stats";
    case Op::kGetState: return "get_state";
    case Op::kSetState: return "set_state";
    case Op::kGetAggregatorState: return "get_aggregator_state";
    case Op::kSetAggregatorState: return "set_aggregator_state";
    case Op::kResidualRound: return "residual_round";
    case Op::kPutResidual: return "put_residual";
    case Op::kGetResidual: return "get_residual";
  }
  return "?";
}

constexpr std::size_t kErrorTextBytes = 1024;

}  // namespace

Client::Client(comm::Transport& transport, ShardLayout layout, std::vector<int> server_ranks,
               std::int64_t workers, std::chrono::milliseconds timeout, Compression compression)
    : transport_(transport),
      layout_(layout),
      compression_(compression),
      push_codec_(compress::make_codec(compression.push)),
      pull_codec_(compress::make_codec(compression.pull)),
      server_ranks_(std::move(server_ranks)),
      timeout_(timeout) {
  check_compression(compression_, "parameter_server.compression",
                    "parameter_server.pull_compression");
  if (push_codec_ && compression_.push.error_feedback) {
    feedback_ = std::make_unique<compress::ErrorFeedback>(layout_.total());
  }
  if (static_cast<int>(server_ranks_.size()) != layout_.servers()) {
    throw ConfigError(
        fmt::format("parameter-server client: {} server ranks for a layout of {} "
                    "servers",
                    server_ranks_.size(), layout_.servers()));
  }
  const auto servers = server_ranks_.size();
  requests_.resize(servers);
  replies_.resize(servers);
  basis_clock_.assign(servers, 0);
  basis_version_.assign(servers, 0);
  for (std::size_t s = 0; s < servers; ++s) {
    const auto shard_bytes =
        static_cast<std::size_t>(layout_.shard(static_cast<int>(s)).size()) * sizeof(float);
    const std::int64_t keys = layout_.shard(static_cast<int>(s)).size();
    requests_[s].resize(sizeof(RequestHeader) +
                        std::max(shard_bytes, push_payload_bytes(compression_.push, keys)));
    if (feedback_) sent_.resize(std::max(sent_.size(), static_cast<std::size_t>(keys)));
    replies_[s].resize(
        sizeof(ReplyHeader) +
        std::max({shard_bytes, kErrorTextBytes,
                  static_cast<std::size_t>(ServerStats::encoded_size(workers)) * 8}));
  }
}

Client::~Client() = default;

std::span<const float> Client::residual() const {
  if (!feedback_) return {};
  return feedback_->residual();
}

void Client::set_residual(std::span<const float> values) {
  DTRAIN_CHECK(feedback_ != nullptr && std::ssize(values) == layout_.total(),
               "a residual of {} floats for a client with{} error feedback over {} keys",
               values.size(), feedback_ ? "" : "out", layout_.total());
  std::lock_guard<std::mutex> lock(mu_);
  feedback_->set_residual(values);
}

std::size_t Client::write_push(std::size_t s, KeyRange range, const float* grads,
                               RequestHeader& header, std::byte* out) {
  const float* from = grads + (header.begin - range.begin);
  const std::int64_t n = header.end - header.begin;
  if (!push_codec_) {
    std::memcpy(out, from, static_cast<std::size_t>(n) * sizeof(float));
    return static_cast<std::size_t>(n) * sizeof(float);
  }
  header.flags |= kEncoded;
  header.seed = push_seed(compression_.seed, transport_.rank(), header.clock, static_cast<int>(s));
  auto* payload = reinterpret_cast<std::uint8_t*>(out);
  if (feedback_) {
    feedback_->encode(*push_codec_, header.begin, from, n, payload, header.seed, sent_.data());
  } else {
    push_codec_->encode(from, n, payload, header.seed);
  }
  return push_codec_->encoded_bytes(n);
}

std::vector<ShardPiece> Client::all_servers() const {
  std::vector<ShardPiece> pieces;
  for (int s = 0; s < layout_.servers(); ++s) pieces.push_back({s, {}});
  return pieces;
}

std::vector<ReplyHeader> Client::exchange(Op op, const std::vector<ShardPiece>& pieces,
                                          KeyRange range, const float* send, float* receive,
                                          const RequestHeader& base) {
  const auto start = Clock::now();
  const auto deadline = start + timeout_;
  // One stall warning per exchange, for its first request still unanswered at the threshold.
  std::optional<comm::StallWatch> watch;
  const std::string label = fmt::format("ps worker (rank {})", transport_.rank());
  if (stall_warning_.count() > 0 && stall_warning_ < timeout_) {
    watch.emplace();
    watch->start = start;
    watch->at = start + stall_warning_;
    watch->timeout = timeout_;
    watch->label = label;
    watch->what = [op, clock = base.clock] {
      return fmt::format("ps {} of step {}", op_name(op), clock);
    };
  }
  comm::StallWatch* const stall = watch ? &*watch : nullptr;
  std::vector<std::unique_ptr<comm::Request>> sends;
  std::vector<std::unique_ptr<comm::Request>> receives;
  for (const ShardPiece& piece : pieces) {
    const auto s = static_cast<std::size_t>(piece.server);
    RequestHeader header = base;
    header.op = op;
    header.begin = piece.range.begin;
    header.end = piece.range.end;
    header.basis_clock = basis_clock_[s];
    header.basis_version = basis_version_[s];
    std::vector<std::byte>& request = requests_[s];
    std::size_t bytes = sizeof header;
    if (send != nullptr && op == Op::kPush) {
      bytes += write_push(s, range, send, header, request.data() + sizeof header);
      push_bytes_ += static_cast<std::int64_t>(bytes);
    } else if (send != nullptr) {
      const auto n = static_cast<std::size_t>(piece.range.size());
      std::memcpy(request.data() + bytes, send + (piece.range.begin - range.begin),
                  n * sizeof(float));
      bytes += n * sizeof(float);
    }
    std::memcpy(request.data(), &header, sizeof header);
    receives.push_back(
        transport_.irecv(server_ranks_[s], kReplyTag, replies_[s].data(), replies_[s].size()));
    receives.back()->describe_as(server_ranks_[s], false, replies_[s].size());
    sends.push_back(transport_.isend(server_ranks_[s], kRequestTag, request.data(), bytes));
    sends.back()->describe_as(server_ranks_[s], true, bytes);
    bytes_sent_ += static_cast<std::int64_t>(bytes);
  }
  std::vector<ReplyHeader> headers;
  std::string error, evicted;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const auto s = static_cast<std::size_t>(pieces[i].server);
    try {
      comm::wait_watched(*sends[i], deadline, stall);
      comm::wait_watched(*receives[i], deadline, stall);
    } catch (const comm::CommError& e) {
      throw comm::CommError(fmt::format("ps {} to server {} (rank {}): {}", op_name(op), s,
                                        server_ranks_[s], e.what()));
    }
    ReplyHeader header;
    std::memcpy(&header, replies_[s].data(), sizeof header);
    const bool failed = header.status == Status::kError || header.status == Status::kRefused ||
                        header.status == Status::kEvicted;
    const bool encoded = !failed && (header.flags & kEncoded) != 0;
    const std::size_t element_bytes = op == Op::kStats ? sizeof(std::int64_t)
                                      : failed         ? 1
                                                       : sizeof(float);
    const std::size_t payload_bytes = encoded
                                          ? pull_payload_bytes(compression_.pull, header.count)
                                          : static_cast<std::size_t>(header.count) * element_bytes;
    bytes_received_ += static_cast<std::int64_t>(sizeof header + payload_bytes);
    if (!failed && (op == Op::kPush || op == Op::kPull) && receive != nullptr && header.count > 0) {
      param_reply_bytes_ += static_cast<std::int64_t>(sizeof header + payload_bytes);
    }
    const std::byte* payload = replies_[s].data() + sizeof header;
    if (failed) {
      const std::string text =
          fmt::format("ps {} to server {} (rank {}) failed: {}", op_name(op), s, server_ranks_[s],
                      std::string(reinterpret_cast<const char*>(payload),
                                  static_cast<std::size_t>(std::min<std::int64_t>(
                                      header.count, static_cast<std::int64_t>(kErrorTextBytes)))));
      // A failed server answers nothing more: say so now. Evicted or refused: the other servers'
      // replies are still taken, so that the next request (a stop's) pairs with its own.
      if (header.status == Status::kError) throw comm::CommError(text);
      std::string& first = header.status == Status::kEvicted ? evicted : error;
      if (first.empty()) first = text;
      continue;
    }
    if (receive != nullptr && header.count > 0) {
      DTRAIN_CHECK_EQ(header.count, pieces[i].range.size());
      float* to = receive + (pieces[i].range.begin - range.begin);
      if (encoded) {
        if (!pull_codec_) {
          throw comm::CommError(fmt::format(
              "ps {} to server {} (rank {}): encoded parameters arrived but this worker's "
              "parameter_server.pull_compression is none: the workers and servers disagree",
              op_name(op), s, server_ranks_[s]));
        }
        pull_codec_->decode(reinterpret_cast<const std::uint8_t*>(payload), header.count, to, 0);
      } else {
        std::memcpy(to, payload, static_cast<std::size_t>(header.count) * sizeof(float));
      }
      basis_clock_[s] = header.min_clock;
      basis_version_[s] = header.version;
    }
    headers.push_back(header);
  }
  if (!evicted.empty()) throw EvictedError(evicted);
  // Refused: the request itself was wrong (a checkpoint's state that does not fit the servers), so
  // a restart would be refused alike: bad input (exit 2), not a failed rank (exit 4).
  if (!error.empty()) throw CheckpointError(error);
  // A checkpoint of async / ssp asks for this worker's residual (protocol.h, kResidualRound): sent
  // at once to each server that asked, before the worker's next step. Not after a stop: the
  // server may be gone.
  if (feedback_ && (op == Op::kPush || op == Op::kPull || op == Op::kTicket)) {
    std::vector<ShardPiece> owed;
    for (std::size_t i = 0; i < headers.size(); ++i) {
      if ((headers[i].flags & kSendResidual) != 0) {
        owed.push_back({pieces[i].server, layout_.shard(pieces[i].server)});
      }
    }
    if (!owed.empty()) {
      const std::span<const float> residual = feedback_->residual();
      exchange(Op::kPutResidual, owed, {0, layout_.total()}, residual.data(), nullptr, {});
    }
  }
  return headers;
}

PushResult Client::push(KeyRange range, const float* grads, const PushInfo& info, float* params) {
  const std::vector<ShardPiece> pieces = layout_.split(range);
  for (const ShardPiece& piece : pieces) {
    const KeyRange shard = layout_.shard(piece.server);
    if (piece.range != shard) {
      throw ConfigError(fmt::format(
          "ps push of keys [{}, {}) cuts server {}'s shard [{}, {}): a push runs the server's "
          "optimizer over its whole shard; push whole shards, or use add() for a partial update",
          range.begin, range.end, piece.server, shard.begin, shard.end));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  RequestHeader base;
  base.flags = params != nullptr ? kWantParams : 0;
  base.clock = info.clock;
  base.samples = info.samples;
  base.batch_samples = info.batch_samples;
  base.lr = info.lr;
  ++pushes_;
  if (params != nullptr) ++param_replies_;
  PushResult result;
  result.version = -1;
  for (const ReplyHeader& header : exchange(Op::kPush, pieces, range, grads, params, base)) {
    result.dropped = result.dropped || header.status == Status::kDropped;
    result.version = result.version < 0 ? header.version : std::min(result.version, header.version);
  }
  result.version = std::max<std::int64_t>(result.version, 0);
  return result;
}

void Client::pull(KeyRange range, float* out, std::int64_t clock) {
  std::lock_guard<std::mutex> lock(mu_);
  RequestHeader base;
  base.clock = clock;
  ++param_replies_;
  exchange(Op::kPull, layout_.split(range), range, nullptr, out, base);
}

void Client::put(KeyRange range, const float* values) {
  std::lock_guard<std::mutex> lock(mu_);
  exchange(Op::kPut, layout_.split(range), range, values, nullptr, {});
}

void Client::get(KeyRange range, float* out) {
  std::lock_guard<std::mutex> lock(mu_);
  exchange(Op::kGet, layout_.split(range), range, nullptr, out, {});
}

void Client::add(KeyRange range, const float* values) {
  std::lock_guard<std::mutex> lock(mu_);
  exchange(Op::kAdd, layout_.split(range), range, values, nullptr, {});
}

OptimizerState Client::get_state(KeyRange range) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<ShardPiece> pieces = layout_.split(range);
  OptimizerState out;
  std::vector<float> first(static_cast<std::size_t>(range.size()));
  RequestHeader base;
  base.index = 0;
  const std::vector<ReplyHeader> headers =
      exchange(Op::kGetState, pieces, range, nullptr, first.data(), base);
  std::int64_t vectors = 0;
  for (std::size_t i = 0; i < headers.size(); ++i) {
    out.steps.push_back(headers[i].version);
    if (i > 0 && headers[i].value != vectors) {
      throw comm::CommError(fmt::format(
          "ps get_state: server {} has {} optimizer state vectors, server {} has {}: the servers "
          "run different optimizers",
          pieces[i].server, headers[i].value, pieces[0].server, vectors));
    }
    vectors = headers[i].value;
  }
  if (vectors == 0) return out;
  out.vectors.push_back(std::move(first));
  for (std::int64_t v = 1; v < vectors; ++v) {
    std::vector<float> values(static_cast<std::size_t>(range.size()));
    base.index = v;
    exchange(Op::kGetState, pieces, range, nullptr, values.data(), base);
    out.vectors.push_back(std::move(values));
  }
  return out;
}

void Client::set_state(KeyRange range, const std::vector<std::vector<float>>& vectors,
                       std::int64_t steps) {
  for (const auto& values : vectors) {
    if (static_cast<std::int64_t>(values.size()) != range.size()) {
      throw InternalError(fmt::format("ps set_state: a state vector of {} floats for keys [{}, {})",
                                      values.size(), range.begin, range.end));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<ShardPiece> pieces = layout_.split(range);
  RequestHeader base;
  base.steps = steps;
  base.index = -1;
  if (vectors.empty()) exchange(Op::kSetState, pieces, range, nullptr, nullptr, base);
  for (std::size_t v = 0; v < vectors.size(); ++v) {
    base.index = static_cast<std::int64_t>(v);
    exchange(Op::kSetState, pieces, range, vectors[v].data(), nullptr, base);
  }
}

std::vector<std::vector<float>> Client::get_aggregator_states() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::vector<float>> out;
  for (int s = 0; s < layout_.servers(); ++s) {
    const std::int64_t total =
        exchange(Op::kGetAggregatorState, {{s, {}}}, {}, nullptr, nullptr, {}).front().value;
    std::vector<float> state(static_cast<std::size_t>(total));
    const std::int64_t chunk = std::max<std::int64_t>(1, layout_.shard(s).size());
    for (std::int64_t at = 0; at < total; at += chunk) {
      const KeyRange part{at, std::min(total, at + chunk)};
      exchange(Op::kGetAggregatorState, {{s, part}}, part, nullptr, state.data() + at, {});
    }
    out.push_back(std::move(state));
  }
  return out;
}

std::vector<bool> Client::set_aggregator_states(const std::vector<std::vector<float>>& states) {
  if (std::ssize(states) != layout_.servers()) {
    throw InternalError(fmt::format("ps set_aggregator_states: {} states for {} servers",
                                    states.size(), layout_.servers()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<bool> loaded;
  for (int s = 0; s < layout_.servers(); ++s) {
    const std::vector<float>& state = states[static_cast<std::size_t>(s)];
    const auto total = static_cast<std::int64_t>(state.size());
    const std::int64_t chunk = std::max<std::int64_t>(1, layout_.shard(s).size());
    RequestHeader base;
    base.index = total;
    std::int64_t at = 0;
    do {
      const KeyRange part{at, std::min(total, at + chunk)};
      const ReplyHeader reply = exchange(Op::kSetAggregatorState, {{s, part}}, part,
                                         total > 0 ? state.data() + at : nullptr, nullptr, base)
                                    .front();
      if (part.end == total) loaded.push_back(reply.value == 1);
      at = part.end;
    } while (at < total);
  }
  return loaded;
}

std::int64_t Client::next_ticket(std::int64_t at_least) {
  std::lock_guard<std::mutex> lock(mu_);
  RequestHeader base;
  base.clock = at_least;
  return exchange(Op::kTicket, {{0, {}}}, {}, nullptr, nullptr, base).front().value;
}

std::int64_t Client::peek_ticket() {
  std::lock_guard<std::mutex> lock(mu_);
  RequestHeader base;
  base.flags = kPeekTicket;
  return exchange(Op::kTicket, {{0, {}}}, {}, nullptr, nullptr, base).front().value;
}

void Client::begin_residual_round() {
  std::lock_guard<std::mutex> lock(mu_);
  exchange(Op::kResidualRound, all_servers(), {}, nullptr, nullptr, {});
}

std::vector<float> Client::get_residual(int worker) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<float> out(static_cast<std::size_t>(layout_.total()), 0.0f);
  RequestHeader base;
  base.index = worker;
  const KeyRange all{0, layout_.total()};
  for (const ReplyHeader& header :
       exchange(Op::kGetResidual, layout_.split(all), all, nullptr, out.data(), base)) {
    if (header.count == 0 && !out.empty()) return {};  // a server has none: the worker has none
  }
  return out;
}

void Client::stop(bool with_residual) {
  std::lock_guard<std::mutex> lock(mu_);
  if (with_residual && feedback_) {
    const std::span<const float> residual = feedback_->residual();
    try {
      exchange(Op::kPutResidual, layout_.split({0, layout_.total()}), {0, layout_.total()},
               residual.data(), nullptr, {});
    } catch (const EvictedError&) {
      // Counted dead: no checkpoint wants its residual; the stop below is still answered.
    }
  }
  exchange(Op::kStop, all_servers(), {}, nullptr, nullptr, {});
}

std::vector<ServerStats> Client::stop_with_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ServerStats> out;
  const auto headers = exchange(Op::kStats, all_servers(), {}, nullptr, nullptr, {});
  for (std::size_t s = 0; s < headers.size(); ++s) {
    const auto* values =
        reinterpret_cast<const std::int64_t*>(replies_[s].data() + sizeof(ReplyHeader));
    out.push_back(ServerStats::decode({values, static_cast<std::size_t>(headers[s].count)}));
  }
  return out;
}

comm::Work Client::submit(std::string what, std::function<void()> operation) {
  comm::Work work(fmt::format("ps {} #{}", what, async_ops_++));
  queue_.push([work, operation = std::move(operation)] {
    try {
      operation();
      work.finish(nullptr);
    } catch (...) {
      work.finish(std::current_exception());
    }
  });
  return work;
}

comm::Work Client::push_async(KeyRange range, const float* grads, const PushInfo& info,
                              float* params) {
  return submit("push", [this, range, grads, info, params] { push(range, grads, info, params); });
}

comm::Work Client::get_async(KeyRange range, float* out) {
  return submit("get", [this, range, out] { get(range, out); });
}

comm::Work Client::add_async(KeyRange range, const float* values) {
  return submit("add", [this, range, values] { add(range, values); });
}

}  // namespace dtrain::ps
