// The compressed allreduce of 1-bit Adam (Tang et al. 2021, Algorithm 1; DeepSpeed's
// compressed_allreduce): the average of the ranks' vectors, each sent as signs and a scale, with
// error feedback on both sides so that what one step rounds away the next one sends.
//
// The vector of n elements is cut into P chunks of c = ceil(n / P) rounded up to a multiple of 8
// elements (the last ones shorter or empty); rank j owns chunk j ("server" j).
//   1. worker  every chunk of x + e_worker goes through the sign codec (compress/sign_codec.h:
//              mean |.| of the chunk as the scale, one bit per element); e_worker = what it lost
//   2. alltoall  chunk j of every rank to rank j                  (P-1) x S bytes sent per rank
//   3. server  y = (1/P) sum over ranks of the decoded chunks, in rank order; y + e_server through
//              the sign codec again; e_server = what it lost
//   4. allgather  every server's payload to every rank            (P-1) x S bytes sent per rank
//   5. each rank decodes the P payloads: the same n values on every rank
// with S = 4 + c / 8 bytes (a scale and c bits). Bytes sent per rank and call: 2 (P-1) S, about
// 2 (P-1)/P x n / 8 against a ring allreduce's 2 (P-1)/P x 4 n: 32x fewer (minus 8 bytes of scales
// per peer). Cost in memory passes: encode and decode of n elements twice each.
//
// State: e_worker (n floats) and e_server (c floats), this rank's own; both zero at the start.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/compress/error_feedback.h"
#include "dtrain/compress/sign_codec.h"

namespace dtrain::parallel {

class OneBitAllreduce {
 public:
  // Collective over `comm` for vectors of `count` elements (the same on every rank).
  OneBitAllreduce(comm::Communicator& comm, std::int64_t count,
                  comm::CollectiveOptions options = {});

  // data: (count) this rank's vector -> the compressed average, identical on every rank.
  void average(float* data);

  // c: elements per chunk for n elements over P ranks.
  static std::int64_t chunk_elements(std::int64_t count, int ranks);
  // S: the payload of one chunk in bytes.
  static std::int64_t payload_bytes(std::int64_t count, int ranks);
  // 2 (P-1) S: what average() sends per rank.
  static std::int64_t bytes_sent(std::int64_t count, int ranks);

  std::int64_t count() const { return count_; }
  std::span<const float> worker_error() const { return worker_.residual(); }
  std::span<const float> server_error() const { return server_.residual(); }
  // Saved errors back (a checkpoint's); sizes count and chunk_elements().
  void set_errors(std::span<const float> worker, std::span<const float> server);

 private:
  // [first, first + n) of the vector: chunk j.
  std::int64_t chunk_first(int j) const;
  std::int64_t chunk_count(int j) const;

  comm::Communicator& comm_;
  comm::CollectiveOptions options_;
  std::int64_t count_;
  std::int64_t chunk_;
  std::int64_t payload_;
  compress::SignCodec codec_;
  compress::ErrorFeedback worker_;
  compress::ErrorFeedback server_;
  std::vector<std::uint8_t> sent_;      // P payloads, chunk j for rank j
  std::vector<std::uint8_t> received_;  // P payloads of this rank's chunk, rank r's at r
  std::vector<std::uint8_t> served_;    // this rank's server payload
  std::vector<std::uint8_t> gathered_;  // every server's payload, server j's at j
  std::vector<float> average_;          // this rank's chunk: the workers' average
  std::vector<float> scratch_;          // a chunk: what the codec sent
};

}  // namespace dtrain::parallel
