// A worker's side of the parameter servers: push gradients, pull parameters, and the key-value
// view (put, get, add) over the flat parameter vector, split by ShardLayout over the servers and
// sent to all of them at once. Each operation has a blocking form; push, get and add also have an
// *_async form returning a
// comm::Work (run in order on the client's own thread); operations never overlap on the wire: one
// request per server in flight, which is what pairs each reply with its request (protocol.h).
//
// Push: the gradient of a key range made of whole shards (a push runs the servers' optimizer
// over whole shards; add() is the partial update); PushInfo says which step it belongs to and how
// many samples it covers. With `params`
// set it is push-and-pull: each server answers with its shard after the update (bsp: after the
// step completes; ssp: once the slowest worker is close enough), one round trip per step.
//
// Compression (compression.h): pushes encoded per server's shard with the push codec (error
// feedback: the residual is this client's, one flat buffer over all keys), the parameters of pulls
// and push-and-pulls decoded from the pull codec; get(), put(), add() and the checkpoint
// operations stay f32.
//
// The client remembers, per server, the min_clock and version of the last reply that carried
// parameters: the basis the next push reports, from which the servers compute staleness.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/task_queue.h"
#include "dtrain/comm/transport/transport.h"
#include "dtrain/comm/work.h"
#include "dtrain/compress/codec.h"
#include "dtrain/compress/error_feedback.h"
#include "dtrain/ps/compression.h"
#include "dtrain/ps/protocol.h"
#include "dtrain/ps/server_stats.h"
#include "dtrain/ps/shard_layout.h"

namespace dtrain::ps {

struct PushInfo {
  std::int64_t clock = 0;          // the worker's step of this gradient
  std::int64_t samples = 0;        // samples behind it
  std::int64_t batch_samples = 0;  // the step's batch over all workers (bsp)
  double lr = 0.0;                 // the learning rate the servers apply it with
};

struct PushResult {
  bool dropped = false;  // bsp: it came after its step completed (a backup worker was faster)
  // The updates the servers had applied when they answered (the least over them): bsp, the steps
  // completed; async / ssp, the pushes applied. Each server's optimizer has taken as many steps.
  std::int64_t version = 0;
};

// The servers' optimizer state over a key range, for a checkpoint: each state vector laid out by
// key (range.size() floats, zero where no tensor lies; none for plain SGD), and each server's step
// count (in the order of the servers the range touches).
struct OptimizerState {
  std::vector<std::vector<float>> vectors;
  std::vector<std::int64_t> steps;
};

// A server counted this worker dead (async / ssp: silent past the deadline) and trains on without
// it: the worker's requests are refused from then on, and it should stop (the run goes on).
class EvictedError : public comm::CommError {
 public:
  using comm::CommError::CommError;
};

class Client {
 public:
  // `transport`: the parameter-server communicator's; `server_ranks[s]`: server s's rank on it;
  // `workers`: how many workers the servers serve (sizes the stats replies).
  // `compression`: the same on every worker and server (the servers' ServerOptions::compression).
  Client(comm::Transport& transport, ShardLayout layout, std::vector<int> server_ranks,
         std::int64_t workers, std::chrono::milliseconds timeout = std::chrono::milliseconds(60000),
         Compression compression = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ShardLayout& layout() const { return layout_; }
  // A request still unanswered after `after` logs one stall warning naming the op, its step and
  // the server's rank, then waits on to the timeout (comm/stall_watch.h). Zero (the default), or
  // not below the timeout: none.
  void set_stall_warning(std::chrono::milliseconds after) { stall_warning_ = after; }
  // Bytes this client has sent and received (headers included), for bytes-moved figures.
  std::int64_t bytes_sent() const { return bytes_sent_; }
  std::int64_t bytes_received() const { return bytes_received_; }
  // Pushes sent and their bytes (headers included); replies that carried parameters (pull,
  // push-and-pull) and their bytes: the measured side of compression.h's formulas.
  std::int64_t pushes() const { return pushes_; }
  std::int64_t push_bytes() const { return push_bytes_; }
  std::int64_t param_replies() const { return param_replies_; }
  std::int64_t param_reply_bytes() const { return param_reply_bytes_; }

  const Compression& compression() const { return compression_; }
  // Error feedback's residual over all keys (empty without error feedback), and setting it (a
  // checkpoint's; the same size).
  std::span<const float> residual() const;
  void set_residual(std::span<const float> values);

  // grads: range.size() floats; params: null (push only) or range.size() floats. A range that
  // cuts a shard is a ConfigError naming it.
  PushResult push(KeyRange range, const float* grads, const PushInfo& info,
                  float* params = nullptr);
  // The parameters of `range` into out (range.size() floats), for a worker about to compute step
  // `clock` (bsp and ssp hold the answer until the servers allow that step).
  void pull(KeyRange range, float* out, std::int64_t clock = 0);
  void put(KeyRange range, const float* values);
  void get(KeyRange range, float* out);
  void add(KeyRange range, const float* values);
  // The next batch of the run to train on, handed out by server 0 (-1: none left); none below
  // `at_least` (a resumed run's first epoch starts there).
  std::int64_t next_ticket(std::int64_t at_least = 0);
  // Checkpoints: the servers' optimizer state over `range`, and setting it (`vectors`: as
  // get_state returns them, in the optimizer's order; empty for plain SGD) with every server's
  // optimizer step and update count set to `steps`. A server whose optimizer disagrees answers
  // with an error, rethrown here.
  OptimizerState get_state(KeyRange range);
  void set_state(KeyRange range, const std::vector<std::vector<float>>& vectors,
                 std::int64_t steps);
  // Each server's robust-aggregator state (protocol.h: kGetAggregatorState), in server order:
  // empty for a server without one or with a stateless one. Moved in chunks of a shard's floats.
  std::vector<std::vector<float>> get_aggregator_states();
  // Sets them, one per server as get_aggregator_states() returned them; whether each server's fit
  // its aggregator and was loaded (a server whose state did not fit keeps its own).
  std::vector<bool> set_aggregator_states(const std::vector<std::vector<float>>& states);
  // Checkpoints inside an epoch of async / ssp (protocol.h): the next ticket server 0 would hand
  // out, without taking it; a round in which every other worker sends the servers its
  // error-feedback residual with its next request (each client does so on its own, inside
  // push / pull / next_ticket); and worker `worker`'s residual over all keys once it is in (empty
  // when it cannot come: the worker stopped without one, died, or is held by ssp's bound).
  std::int64_t peek_ticket();
  void begin_residual_round();
  std::vector<float> get_residual(int worker);
  // This worker is done: the servers stop serving once every worker is. Call one of these two
  // last: stop_with_stats() also waits until every worker has stopped (or died) and returns each
  // server's statistics. `with_residual` (async / ssp with error feedback): the residual goes to
  // the servers first, for a checkpoint worker 0 takes after this stop.
  void stop(bool with_residual = false);
  std::vector<ServerStats> stop_with_stats();

  comm::Work push_async(KeyRange range, const float* grads, const PushInfo& info,
                        float* params = nullptr);
  comm::Work get_async(KeyRange range, float* out);
  comm::Work add_async(KeyRange range, const float* values);

 private:
  // One request to each server in `pieces`, then every reply (their headers, in piece order);
  // `send` / `receive` hold the floats of `range` (null: none).
  std::vector<ReplyHeader> exchange(Op op, const std::vector<ShardPiece>& pieces, KeyRange range,
                                    const float* send, float* receive, const RequestHeader& base);
  std::vector<ShardPiece> all_servers() const;
  comm::Work submit(std::string what, std::function<void()> operation);

  // The request payload of a push to server s (piece `range` of the keys): f32, or encoded (with
  // error feedback when on). Returns its bytes; sets `header`'s flags and seed.
  std::size_t write_push(std::size_t s, KeyRange range, const float* grads, RequestHeader& header,
                         std::byte* out);

  comm::Transport& transport_;
  ShardLayout layout_;
  Compression compression_;
  std::unique_ptr<compress::Codec> push_codec_;  // null: f32 pushes
  std::unique_ptr<compress::Codec> pull_codec_;  // null: f32 parameters
  std::unique_ptr<compress::ErrorFeedback> feedback_;
  std::vector<float> sent_;  // error feedback: decode(payload) of one shard
  std::vector<int> server_ranks_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds stall_warning_{0};
  std::mutex mu_;  // one operation on the wire at a time
  std::vector<std::vector<std::byte>> requests_;
  std::vector<std::vector<std::byte>> replies_;
  std::vector<std::int64_t> basis_clock_;
  std::vector<std::int64_t> basis_version_;
  std::atomic<std::int64_t> bytes_sent_{0};
  std::atomic<std::int64_t> bytes_received_{0};
  std::atomic<std::int64_t> pushes_{0};
  std::atomic<std::int64_t> push_bytes_{0};
  std::atomic<std::int64_t> param_replies_{0};
  std::atomic<std::int64_t> param_reply_bytes_{0};
  std::atomic<std::int64_t> async_ops_{0};  // numbers the Works in timeouts
  comm::TaskQueue queue_;  // last: joined first, while the buffers above still exist
};

}  // namespace dtrain::ps
