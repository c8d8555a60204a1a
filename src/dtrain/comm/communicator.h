// The collectives every parallel strategy uses, over any Transport: rank, size, split into
// sub-communicators, point-to-point send/recv, barrier, broadcast, scatter, gather, allreduce (in
// and out of place), reduce, allgather, reduce-scatter, alltoall and the neighbour allreduce of
// decentralized SGD, each also as *_async returning a Work. Buffers are raw typed memory (data,
// count, DType[, ReduceOp]); tensors never cross into comm/.
//
// Every collective call takes the next sequence number of this communicator (all ranks must call
// collectives in the same order, as in MPI); its messages carry a tag derived from that number, so
// concurrent calls (a blocking one beside async ones) never mix.
//
// Policy (docs/COMM.md): every blocking wait has a deadline (CommOptions::timeout, per call
// CollectiveOptions::timeout). Before a collective, a cheap header check (on by default) sends
// each rank's arguments to rank 0, which answers every rank with a verdict: ranks that disagree
// about the collective, count, dtype, op, root, algorithm or tag get an error naming both values
// and both ranks; ranks that do not arrive within 3/4 of the timeout are named as missing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/base/dtype.h"
#include "dtrain/comm/reduce_op.h"
#include "dtrain/comm/stats.h"
#include "dtrain/comm/task_queue.h"
#include "dtrain/comm/topology.h"
#include "dtrain/comm/transport/transport.h"
#include "dtrain/comm/work.h"

namespace dtrain::comm {

class Channel;
struct StallWatch;
struct Traffic;
struct AlphaBeta;

// DTRAIN_COMM_TIMEOUT_MS if set (a positive integer), else 60 s.
std::chrono::milliseconds default_comm_timeout();

struct CommOptions {
  // Deadline of every blocking wait of one call.
  std::chrono::milliseconds timeout = default_comm_timeout();
  // What a user sets to change `timeout`: a deadline's error ends "the deadline is 3 s: a rank
  // died or is stuck (raise <timeout_setting> if it is only slow)".
  std::string timeout_setting = "parallel.comm_timeout_seconds";
  // The cross-rank argument check before each collective: 2(P - 1) small messages through rank 0.
  // Turn off for benchmarks; mismatches then show up as size errors or wrong results.
  bool check_headers = true;
  // The allreduce algorithm when a call names none (algorithms.h lists the names).
  std::string allreduce_algorithm = "ring";
  // Largest message of pipelined algorithms; tests make it tiny to force many segments.
  std::size_t segment_bytes = std::size_t{1} << 20;
  // Group size of the "hierarchical" allreduce: groups of local_size consecutive ranks (the
  // threads of one process, the ranks of one node), the last one smaller when it does not divide
  // P. 0 means the whole communicator is one group (the transport does not tell dtrain which ranks
  // share a node), which makes hierarchical a binomial reduce and broadcast.
  int local_size = 0;
  // The alpha-beta model of the "auto" allreduce (algorithms/cost_model.h): both > 0 use these
  // figures; both 0 (the default) measure them at the first auto call of this communicator.
  double alpha_us = 0.0;
  double beta_us_per_byte = 0.0;
  // Stall inspector (Horovod's): when rank 0 has waited this long for the other ranks to arrive at
  // a collective, it logs a warning naming the collective and the ranks not yet there; the
  // deadline (timeout) later fails the call if they never come. Zero turns the warning off. Needs
  // check_headers (the arrivals are the headers).
  std::chrono::milliseconds stall_warning{10000};
};

// Communicator::split's color for ranks that join no sub-communicator (MPI_UNDEFINED): any
// negative color.
inline constexpr int kUndefinedColor = -1;

struct CollectiveOptions {
  // Allreduce: one of allreduce_algorithms(); empty means CommOptions::allreduce_algorithm. The
  // other collectives have one algorithm each ("binomial" broadcast/reduce/barrier, "ring"
  // allgather/reduce-scatter) and accept only that name or empty.
  std::string algorithm;
  // Zero means CommOptions::timeout.
  std::chrono::milliseconds timeout{0};
  // Buffers are ignored on the ranks where a collective neither reads nor writes them (scatter's
  // input and gather's output off the root): they may be null there.
  // Folded into the message tags and checked across ranks; lets a caller label independent
  // streams of collectives.
  std::uint16_t tag = 0;
  // False skips the header check for this call (with CommOptions::check_headers on): for hot
  // paths whose arguments are equal on every rank by construction, such as gradient buckets after
  // the ranks have compared their parameter layouts. Every rank must pass the same value.
  bool check_header = true;
};

class Communicator;

// A point-to-point message in flight (Communicator::isend / irecv), MPI_Request's role: the buffer
// stays valid (and, for a send, unchanged) until wait() returns. Destroying one that was not waited
// on cancels it (Transport's Request).
class PendingMessage {
 public:
  PendingMessage() = default;
  PendingMessage(PendingMessage&&) noexcept = default;
  PendingMessage& operator=(PendingMessage&&) noexcept = default;
  ~PendingMessage() = default;

  bool active() const { return request_ != nullptr; }
  // Blocks until complete (send: the buffer may be reused; receive: the message is in it), or
  // until the deadline set when it was posted (CommTimeoutError naming this rank, the peer, the
  // count and the tag); records the message in the communicator's stats as "send" or "recv",
  // counting the seconds from the post. Nothing when not active; inactive afterwards.
  void wait();

 private:
  friend class Communicator;
  Communicator* comm_ = nullptr;
  std::unique_ptr<Request> request_;
  std::chrono::steady_clock::time_point posted_{};
  std::chrono::steady_clock::time_point deadline_{};
  bool is_send_ = false;
  int peer_ = 0;
  std::int64_t count_ = 0;
  DType dtype_ = DType::kF32;
  std::uint64_t tag_ = 0;
};

class Communicator {
 public:
  Communicator(std::shared_ptr<Transport> transport, CommOptions options = {});
  // Finishes the async collectives still queued, then returns.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  // 0 for a communicator over a world transport; the id split agreed on for a sub-communicator
  // (the tag bits that keep its traffic apart, transport/sub_transport.h).
  std::uint64_t id() const { return id_; }
  const CommOptions& options() const { return options_; }
  Transport& transport() { return *transport_; }
  CommStats& stats() { return stats_; }

  // Every rank is a thread of this process (Transport::shares_memory): a rank may then read what
  // another rank owns, between two collectives that order the accesses (a barrier's messages
  // carry release/acquire order), as MPI-3 shared-memory windows allow between processes.
  bool shares_memory() const { return transport_->shares_memory(); }
  // Collective, shared memory only (InternalError otherwise): every rank's `address`, indexed by
  // rank. One allgather of 8 bytes per rank. `storage` owns the memory at `address` (e.g.
  // PlacedFloats::storage()); the world keeps it until all of its ranks have ended, because a
  // rank that fails and unwinds would otherwise free memory that ranks past the last barrier are
  // still reading. Empty only where the memory is known to outlive every rank's thread.
  std::vector<const void*> exchange_addresses(const void* address,
                                              std::shared_ptr<const void> storage);

  // Blocking point-to-point with the communicator's deadline; `tag` < 2^47, matched FIFO per
  // (peer, tag); never mixes with collective traffic.
  void send(const void* data, std::int64_t count, DType dtype, int peer, std::uint64_t tag = 0);
  void recv(void* data, std::int64_t count, DType dtype, int peer, std::uint64_t tag = 0);
  // The same messages without blocking (MPI_Isend / MPI_Irecv): they match send/recv and each other
  // by the same rules, and complete with PendingMessage::wait (deadline: now + options().timeout).
  // A pipeline stage posts its activation send and its gradient receive together, so that two
  // neighbours sending to each other at once (1F1B's steady state) never wait on each other.
  PendingMessage isend(const void* data, std::int64_t count, DType dtype, int peer,
                       std::uint64_t tag = 0);
  PendingMessage irecv(void* data, std::int64_t count, DType dtype, int peer,
                       std::uint64_t tag = 0);

  // Collective over this communicator: the ranks that pass the same color >= 0 form a new
  // communicator, ordered by (key, rank here); a negative color (kUndefinedColor) returns null.
  // Options are this communicator's unless given. The child has its own sequence numbers and
  // async thread and runs beside its parent; its traffic never matches the parent's or any other
  // communicator's that shares ranks (a communicator id agreed here folds into every tag). Cost:
  // one allgather of 3 x i64 (counted under "split"). Splits of communicators that share a rank
  // must not run at the same time on two threads of that rank (as in MPI).
  std::unique_ptr<Communicator> split(int color, int key);
  std::unique_ptr<Communicator> split(int color, int key, CommOptions options);

  void barrier(const CollectiveOptions& options = {});
  // data: (count) at every rank; root's values end up everywhere.
  void broadcast(void* data, std::int64_t count, DType dtype, int root,
                 const CollectiveOptions& options = {});
  // data: (count); in place.
  void allreduce(void* data, std::int64_t count, DType dtype, ReduceOp op,
                 const CollectiveOptions& options = {});
  // input, output: (count); the same pointer or disjoint buffers.
  void allreduce(const void* input, void* output, std::int64_t count, DType dtype, ReduceOp op,
                 const CollectiveOptions& options = {});
  // input: (P x count) at root, block r for rank r (may be null elsewhere); output: (count)
  // everywhere. In place at the root: output = input + root x count.
  void scatter(const void* input, void* output, std::int64_t count, DType dtype, int root,
               const CollectiveOptions& options = {});
  // input: (count) everywhere; output: (P x count) at root only (may be null elsewhere), rank r's
  // input in block r. In place at the root: input = output + root x count.
  void gather(const void* input, void* output, std::int64_t count, DType dtype, int root,
              const CollectiveOptions& options = {});
  // input, output: (P x count); block j of rank r's input lands in block r of rank j's output.
  // In place: input == output.
  void alltoall(const void* input, void* output, std::int64_t count, DType dtype,
                const CollectiveOptions& options = {});
  // input: (count) everywhere; output: (count), written at root only (may be null elsewhere).
  void reduce(const void* input, void* output, std::int64_t count, DType dtype, ReduceOp op,
              int root, const CollectiveOptions& options = {});
  // input: (count); output: (P x count), rank r's input at [r x count, (r + 1) x count).
  void allgather(const void* input, void* output, std::int64_t count, DType dtype,
                 const CollectiveOptions& options = {});
  // input: (P x count); output: (count), the reduction of block r of every rank's input.
  void reduce_scatter(const void* input, void* output, std::int64_t count, DType dtype, ReduceOp op,
                      const CollectiveOptions& options = {});
  // In place over near-equal blocks (comm/algorithms/blocks.h: block b is [count b / P,
  // count (b + 1) / P)), as a sharded optimizer (ZeRO-1) uses them: on return block r of `data`
  // at rank r holds the reduction of block r over all ranks; the other blocks hold partial sums.
  // Ring, so (P - 1)/P x count elements sent per rank, no scratch. kAvg divides block r only.
  void reduce_scatter_blocks(void* data, std::int64_t count, DType dtype, ReduceOp op,
                             const CollectiveOptions& options = {});
  // In place, the inverse: rank r contributes block r of `data`; on return every block holds its
  // owner's values on every rank. Ring: (P - 1)/P x count elements sent per rank.
  void allgather_blocks(void* data, std::int64_t count, DType dtype,
                        const CollectiveOptions& options = {});
  // Decentralized averaging (algorithms/neighbor_allreduce.h): output = sum_j W_rj input_j over
  // this rank's in-neighbours j in `topology` at `step` (topology.h), f32 or f64. Point-to-point
  // only between neighbours: out-degree x count elements sent per rank (one-peer exponential:
  // one vector). The topology must span this communicator; the header check compares the
  // topology (and the step, where W changes with it) across ranks. input == output is in place.
  void neighbor_allreduce(const void* input, void* output, std::int64_t count, DType dtype,
                          const Topology& topology, std::int64_t step,
                          const CollectiveOptions& options = {});

  // The same collectives on the communicator's background thread; buffers must stay valid until
  // the Work is done. Works complete in submission order. Argument errors throw here, at once.
  Work barrier_async(const CollectiveOptions& options = {});
  Work broadcast_async(void* data, std::int64_t count, DType dtype, int root,
                       const CollectiveOptions& options = {});
  Work allreduce_async(void* data, std::int64_t count, DType dtype, ReduceOp op,
                       const CollectiveOptions& options = {});
  Work allreduce_async(const void* input, void* output, std::int64_t count, DType dtype,
                       ReduceOp op, const CollectiveOptions& options = {});
  Work reduce_async(const void* input, void* output, std::int64_t count, DType dtype, ReduceOp op,
                    int root, const CollectiveOptions& options = {});
  Work scatter_async(const void* input, void* output, std::int64_t count, DType dtype, int root,
                     const CollectiveOptions& options = {});
  Work gather_async(const void* input, void* output, std::int64_t count, DType dtype, int root,
                    const CollectiveOptions& options = {});
  Work alltoall_async(const void* input, void* output, std::int64_t count, DType dtype,
                      const CollectiveOptions& options = {});
  Work allgather_async(const void* input, void* output, std::int64_t count, DType dtype,
                       const CollectiveOptions& options = {});
  Work reduce_scatter_async(const void* input, void* output, std::int64_t count, DType dtype,
                            ReduceOp op, const CollectiveOptions& options = {});
  Work reduce_scatter_blocks_async(void* data, std::int64_t count, DType dtype, ReduceOp op,
                                   const CollectiveOptions& options = {});
  Work allgather_blocks_async(void* data, std::int64_t count, DType dtype,
                              const CollectiveOptions& options = {});
  Work neighbor_allreduce_async(const void* input, void* output, std::int64_t count, DType dtype,
                                const Topology& topology, std::int64_t step,
                                const CollectiveOptions& options = {});

  // The kinds of collective, as the header check names them.
  enum class Kind : std::uint8_t {
    kBarrier,
    kBroadcast,
    kAllreduce,
    kReduce,
    kAllgather,
    kReduceScatter,
    kScatter,
    kGather,
    kAlltoall,
    kSplit,
    kReduceScatterBlocks,
    kAllgatherBlocks,
    kNeighborAllreduce
  };

 private:
  struct Call {
    Kind kind = Kind::kBarrier;
    const void* input = nullptr;
    void* output = nullptr;
    std::int64_t count = 0;
    DType dtype = DType::kU8;
    ReduceOp op = ReduceOp::kSum;
    int root = 0;
    std::string algorithm;
    std::chrono::milliseconds timeout{0};
    std::uint16_t tag = 0;
    bool check_header = true;
    std::uint64_t seq = 0;
    // auto allreduce: this call measures alpha and beta (the first auto call; others wait).
    bool probe = false;
    // neighbor_allreduce: this rank's in-neighbours (itself included, by rank, with weights) and
    // out-neighbours at the call's step.
    std::vector<Neighbor> in_neighbors;
    std::vector<int> out_neighbors;
  };
  struct Hierarchy;
  struct AutoModel;

  // Validates the arguments (ConfigError / ShapeError) and takes the next sequence number.
  Call make_call(Kind kind, const void* input, void* output, std::int64_t count, DType dtype,
                 ReduceOp op, int root, const CollectiveOptions& options);
  void run(const Call& call);
  // `extra`: traffic on channels other than `channel` (hierarchical's sub-transports).
  void execute(const Call& call, Channel& channel, Traffic& extra);
  void run_allreduce(const Call& call, Channel& channel, Traffic& extra);
  const Hierarchy& hierarchy();
  AlphaBeta auto_model(const Call& call, std::chrono::steady_clock::time_point start);
  void check_header(const Call& call, std::chrono::steady_clock::time_point start);
  // "allreduce #57 (ring, 1000 x f32, sum)"; describe: "rank 0: " before it and ": " after.
  std::string call_name(const Call& call) const;
  std::string describe(const Call& call) const;
  // The stall warning of a call that started at `start` (none when CommOptions::stall_warning is
  // off or not below the call's timeout).
  std::optional<StallWatch> stall_watch(std::chrono::steady_clock::time_point start,
                                        std::chrono::milliseconds timeout,
                                        std::function<std::string()> what) const;
  Work submit(Call call);
  friend class PendingMessage;  // its stall warning names this rank as the collectives' do
  Call make_neighbor_call(const void* input, void* output, std::int64_t count, DType dtype,
                          const Topology& topology, std::int64_t step,
                          const CollectiveOptions& options);
  // The arguments of a point-to-point call `what` (send, recv, isend, irecv): ShapeError for a
  // negative count, ConfigError for a peer out of range or a tag at or above 2^47.
  void check_point_to_point(const char* what, std::int64_t count, int peer,
                            std::uint64_t tag) const;
  void point_to_point(bool is_send, void* data, std::int64_t count, DType dtype, int peer,
                      std::uint64_t tag);
  // The checks of point_to_point, then the posted transport request.
  PendingMessage post_point_to_point(bool is_send, void* data, std::int64_t count, DType dtype,
                                     int peer, std::uint64_t tag);

  std::shared_ptr<Transport> transport_;
  CommOptions options_;
  CommStats stats_;
  std::atomic<std::uint64_t> next_seq_{0};
  std::uint64_t id_ = 0;
  std::string label_;  // "rank r", or "rank r of communicator i (world rank w)": error prefixes
  // The smallest communicator id this rank may hand out next, shared by every communicator split
  // from the same world communicator at this rank (split).
  std::shared_ptr<std::atomic<std::uint64_t>> next_id_;
  std::mutex hierarchy_mu_;
  std::unique_ptr<Hierarchy> hierarchy_;
  std::unique_ptr<AutoModel> auto_;
  TaskQueue queue_;  // last: destroyed first, while everything it uses is alive
};

}  // namespace dtrain::comm
