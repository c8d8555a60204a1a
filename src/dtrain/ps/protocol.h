// The messages between parameter-server clients (workers) and servers. Every request gets exactly
// one reply, and a client has at most one request in flight per server, so requests and replies
// pair up by the transport's FIFO order per (source, tag) and need no ids.
//
//   request  RequestHeader [+ payload: floats of [begin, end) for push / put / add]
//   reply    ReplyHeader   [+ payload: floats of [begin, end) for pull / get / get_state / a push
//                           that asked for parameters; i64s for stats; the text of an error]
//
// Checkpoints (get_state / set_state) move one optimizer state vector at a time, laid out by key
// like the parameters (zero at keys no tensor covers), so that a checkpoint does not depend on how
// many servers wrote it and each message fits the buffers a push or pull already uses. A robust
// aggregator's state is each server's own (its shard's centre, say) and moves per server.
//
// Both travel on a communicator of their own (the launcher splits one off), so their tags never
// meet a collective's.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dtrain::ps {

inline constexpr std::uint64_t kRequestTag = 1;
inline constexpr std::uint64_t kReplyTag = 2;

enum class Op : std::uint32_t {
  kPush = 1,  // apply a gradient (bsp: add to the step's sum); kWantParams: reply with parameters
  kPull,      // parameters of [begin, end) (bsp / ssp: once the clock condition holds)
  kPut,       // set [begin, end)
  kGet,       // read [begin, end) at once
  kAdd,       // add to [begin, end)
  kTicket,    // server 0: the next batch of the run to train on (-1: none left), at least `clock`
              // (a resumed run skips the tickets of the epochs its checkpoint holds)
  kStop,      // this worker is done
  kStats,     // stop, then the server's ServerStats once every worker has stopped or died
  kGetState,  // optimizer state vector `index` over [begin, end) (value: how many vectors there
              // are; version: the updates applied = the optimizer's steps)
  kSetState,  // set state vector `index` over [begin, end) (-1: none, payload empty) and the
              // optimizer's steps and the update count to `steps`
  // The robust aggregator's state (aggregate/aggregator.h: state()), as floats holding the raw
  // bits of its doubles, moved in chunks that fit the message buffers: [begin, end) are offsets
  // into it, not keys. Get: value = its length (begin = end = 0 asks only that). Set: `index` =
  // the whole length; the chunk that ends it loads the state, value = 1 if it fit the server's
  // aggregator (0: it did not, and the server keeps its own).
  kGetAggregatorState,
  kSetAggregatorState,
  // Checkpoints inside an epoch of async / ssp (docs/PS.md): error-feedback residuals live on the
  // workers, which never meet, so the servers carry them. kResidualRound (worker 0, to every
  // server): every other live worker owes its residual; the server flags its next replies to
  // that worker (kSendResidual) until it sends kPutResidual (its residual over the server's
  // shard; also sent once before a worker's kStop). kGetResidual: worker `index`'s residual over
  // the shard, held until it arrives; count 0 when there is none to give (the worker stopped
  // without one, died, or is held by the staleness bound, which would wait for worker 0).
  kResidualRound,
  kPutResidual,
  kGetResidual,
};

inline constexpr std::uint32_t kWantParams = 1;
// push: the payload is the push codec's encoding of [begin, end) (ps/compression.h), not floats;
// reply: the parameters are the pull codec's encoding.
inline constexpr std::uint32_t kEncoded = 2;
// ticket: the next ticket's number without taking it (a checkpoint's position in the epoch).
inline constexpr std::uint32_t kPeekTicket = 4;
// reply: this worker owes its error-feedback residual (kResidualRound); it sends kPutResidual.
// (Reply flags and request flags are separate words; distinct bits still keep a dump readable.)
inline constexpr std::uint32_t kSendResidual = 8;

struct RequestHeader {
  Op op = Op::kPush;
  std::uint32_t flags = 0;
  // push: the worker's step of this gradient; pull: the step the worker is about to compute.
  std::int64_t clock = 0;
  std::int64_t begin = 0;  // global keys [begin, end), inside the server's shard
  std::int64_t end = 0;
  std::int64_t samples = 0;        // push: samples behind this gradient
  std::int64_t batch_samples = 0;  // push: samples of the step's whole batch over all workers
  // push: the server's min_clock and version in the reply that gave the parameters this gradient
  // was computed at (its staleness is clock - basis_clock).
  std::int64_t basis_clock = 0;
  std::int64_t basis_version = 0;
  double lr = 0.0;
  std::int64_t index = 0;  // get_state / set_state: which optimizer state vector; get_residual:
                           // which worker
  std::int64_t steps = 0;  // set_state: the optimizer steps and updates the shard continues from
  std::uint64_t seed = 0;  // push with kEncoded: the seed the worker encoded it with
};

// kError: the server failed and stops; kRefused: this request was wrong (a checkpoint's state
// that does not fit), the server serves on. Both carry the text of the error.
// kEvicted: the server counted this worker dead (async / ssp: silent past the deadline) and
// trains on without it; the payload says so (chars). The worker stops (ps::EvictedError).
enum class Status : std::uint32_t { kOk = 0, kDropped = 1, kError = 2, kRefused = 3, kEvicted = 4 };

struct ReplyHeader {
  Status status = Status::kOk;
  std::uint32_t flags = 0;     // kEncoded: the parameters in the pull codec's encoding
  std::int64_t version = 0;    // updates applied to the shard so far
  std::int64_t min_clock = 0;  // the slowest live, unstopped worker's clock
  std::int64_t count = 0;      // payload elements (floats, i64s or chars; encoded: keys)
  std::int64_t value = 0;      // ticket
};

static_assert(sizeof(RequestHeader) % 8 == 0 && sizeof(ReplyHeader) % 8 == 0);

}  // namespace dtrain::ps
