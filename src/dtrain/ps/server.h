// One parameter server: holds one key range (shard) of the flat parameter vector and the optimizer
// state for it, and answers the workers' requests (protocol.h) under a consistency model
// (consistency.h) until every worker has stopped.
//
// serve() is one loop on the calling thread: it keeps one receive posted per worker, handles each
// request as it arrives, and answers at once or holds the answer (a bsp push until its step
// completes, an ssp pull until the slowest worker is close enough, a stats request until every
// worker is done). Idle, it yields the core, then sleeps in short naps: a server thread shares
// the machine with workers that need the cores.
//
// Compression (compression.h): an encoded push is decoded with the seed its header carries (bsp:
// decode_add into the step's sum, in arrival order; async / ssp: decoded into a scratch buffer of
// n floats, then the optimizer step), and pulls answer with the pull codec's encoding of the
// parameters. Costs: one decode of n per push, one encode of n per reply with parameters.
//
// Costs per push of n floats: one receive of 4n bytes, one optimizer pass over n (bsp: one add into
// the step's sum per worker and one pass per step), and for push-and-pull one send of 4n bytes.
//
// Checkpoints: get_state / set_state read and write the optimizer's state over the shard, one
// vector at a time, laid out by key (protocol.h); set_state also sets the optimizer's step count
// and the update count (bsp's step), so that a resumed run continues where its checkpoint stopped.
// A robust aggregator's state (centered clipping's centre over the shard, bucketing's shuffle
// count) moves in chunks of at most a shard's floats (kGetAggregatorState, kSetAggregatorState).
//
// Failures: a bsp step that waits longer than `timeout` for its gradients fails with an error
// naming the workers (and ranks) that did not push, sent to every waiting worker before serve()
// throws it (so workers should wait longer than servers: the verdict then reaches them before their
// own deadlines). In async and ssp a worker silent for `worker_timeout` while not waiting on the
// server is counted as dead and left out: the others go on (ssp stops waiting for it).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/aggregate/aggregator.h"
#include "dtrain/aggregate/attack.h"
#include "dtrain/comm/transport/transport.h"
#include "dtrain/compress/codec.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/ps/compression.h"
#include "dtrain/ps/consistency.h"
#include "dtrain/ps/protocol.h"
#include "dtrain/ps/server_stats.h"
#include "dtrain/ps/shard_layout.h"

namespace dtrain::ps {

struct ServerOptions {
  Consistency consistency = Consistency::kBsp;
  std::int64_t staleness = 0;       // ssp: the bound s
  std::int64_t backup_workers = 0;  // bsp: a step uses the first W - b gradients to arrive
  std::int64_t tickets = 0;         // batches this server hands out (server 0 of a ticketed run)
  optim::OptimizerConfig optimizer;
  // The whole model's tensors (global offsets); each server clips them to its shard.
  std::vector<optim::Segment> segments;
  std::chrono::milliseconds timeout{60000};
  std::chrono::milliseconds worker_timeout{60000};
  // A bsp step still missing gradients, or a worker silent, this long logs one stall warning
  // naming the step and the workers (their ranks) before the deadline fails or drops them. Zero,
  // or not below the timeout: none.
  std::chrono::milliseconds stall_warning{0};
  Compression compression;  // the workers' (Client's), the same
  // Robust aggregation (bsp only; docs/ROBUST.md): an aggregate/aggregator_spec.h spec other than
  // "mean", or an aggregate/attack.h attack, keeps each worker's gradient of the step as a row
  // (its own mean gradient: the push times B / its samples) and combines the rows in worker
  // order; the last `byzantine` workers' rows are replaced by the attack (simulated here, with
  // every honest row in view: ALIE and IPM are omniscient). Cost: W x shard floats of memory.
  std::string aggregator = "mean";
  std::string attack = "none";
  int byzantine = 0;
  std::uint64_t seed = 0;  // bucketing's shuffles and noise's stream
};

class Server {
 public:
  // `transport`: the parameter-server communicator's; `worker_ranks[w]`: worker w's rank on it.
  Server(comm::Transport& transport, int index, ShardLayout layout, std::vector<int> worker_ranks,
         ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  void serve();

  const ServerStats& stats() const { return stats_; }
  KeyRange shard() const { return shard_; }
  std::span<const float> params() const { return params_; }
  const optim::Optimizer& optimizer() const { return *optimizer_; }

 private:
  struct Worker;
  // Whether worker w's request is in; a failed receive (the worker is gone) marks it dead
  // (async / ssp) or fails the server (bsp).
  bool receive_arrived(int w);
  // `listening`: the worker was silent, not gone; its later requests are answered kEvicted.
  void mark_dead(int w, std::string_view why, bool listening = false);
  // Answers a request of an evicted worker: kEvicted with the reason (a plain stop: kOk).
  void answer_evicted(int w);
  void handle(int w);
  // `payload`: the request's, f32 values or (kEncoded) the push codec's bytes.
  void push(int w, const RequestHeader& header, const std::byte* payload);
  // The gradient of an encoded push, decoded into decoded_.
  const float* decode_push(const RequestHeader& header, const std::byte* payload);
  void complete_bsp_step();
  // Robust bsp: the step's rows (after the attack) aggregated into step_sum_.
  void aggregate_rows();
  // Checkpoints: optimizer state vector `tensor` (packed by the optimizer's segments) laid out by
  // key over the shard, zero where no segment lies; get_state / set_state answer those requests.
  std::vector<float> state_by_key(const optim::StateTensor& tensor) const;
  void get_state(int w, const RequestHeader& header);
  void set_state(int w, const RequestHeader& header, const float* values);
  // The aggregator's state as floats (two per double, raw bits); empty without an aggregator.
  std::vector<float> aggregator_state_floats() const;
  void get_aggregator_state(int w, const RequestHeader& header);
  void set_aggregator_state(int w, const RequestHeader& header, const float* values);
  // Answers worker w's request with an error the worker rethrows; the server serves on.
  void reply_error(int w, const std::string& message);
  void release_held();
  // Worker w's kGetResidual, answered when the residual it asks for is in or cannot come.
  void answer_residual(int w);
  void check_deadlines();
  bool finished() const;
  bool pull_ready(std::int64_t clock) const;
  std::int64_t min_clock() const;
  // Sends worker w its reply: header fields from the server's state, then `count` payload elements
  // of `element_bytes` from `payload`, or (`encoded_bytes` > 0) `count` keys encoded by the pull
  // codec in that many bytes.
  void reply(int w, Status status, std::int64_t value = 0, const void* payload = nullptr,
             std::int64_t count = 0, std::size_t element_bytes = 0, std::size_t encoded_bytes = 0);
  void reply_params(int w, Status status, const RequestHeader& header, bool with_params);
  [[noreturn]] void fail(const std::string& message);

  comm::Transport& transport_;
  int index_;
  KeyRange shard_;
  ServerOptions options_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::vector<float> params_;
  std::unique_ptr<compress::Codec> push_codec_;  // null: f32 pushes
  std::unique_ptr<compress::Codec> pull_codec_;  // null: f32 parameters
  std::vector<float> decoded_;                   // async / ssp: an encoded push, decoded
  std::vector<std::uint8_t> encoded_params_;     // a reply's parameters, encoded
  std::vector<Worker> workers_;
  ServerStats stats_;
  std::int64_t next_ticket_ = 0;
  std::int64_t residual_round_ = 0;  // kResidualRound's count
  // bsp: the open step's gradient sum, its contributions and when its first one arrived.
  std::vector<float> step_sum_;
  std::int64_t step_contributions_ = 0;
  std::int64_t step_samples_ = 0;
  std::int64_t step_batch_samples_ = 0;
  double step_lr_ = 0.0;
  std::chrono::steady_clock::time_point step_opened_{};
  // bsp with robust aggregation: worker w's gradient of the open step at rows_[w * shard],
  // the aggregator, and the attack (null: none).
  std::vector<float> rows_;
  std::unique_ptr<aggregate::Aggregator> aggregator_;
  std::unique_ptr<aggregate::Attack> attack_;
  std::vector<float> incoming_aggregator_state_;  // kSetAggregatorState's chunks so far
  // kGetAggregatorState: the state as of the length request, which the chunks are served from.
  std::vector<float> outgoing_aggregator_state_;
  std::int64_t stall_warned_step_ = -1;  // bsp: the step whose stall warning has been logged
};

}  // namespace dtrain::ps
