// The mean over the ranks of one flat vector sent through a codec of compress/
// (docs/COMPRESSION.md, "Where each strategy uses the codecs"): what local SGD's averages and
// federated averaging's uploads and broadcasts use for the model delta each rank sends.
//
//   summable codec (fp16, bf16, random-k)  encode; allreduce (sum) of the payload in the codec's
//                                          wire dtype; decode once; / P. Ring: 2 (P-1)/P x
//                                          encoded_bytes(n) sent per rank.
//   gather codec (top-k, sign, QSGD)       encode; allgather of the payloads (u8); every rank
//                                          decode_adds rank 0's, then rank 1's, ...; / P. Ring:
//                                          (P-1) x encoded_bytes(n) sent per rank.
//
// Every rank ends with the same bits. Error feedback (compress/error_feedback.h), where the spec
// has it, keeps this rank's residual: what its codec left out of one call goes into the next. The
// seeds come from (seed, call) and, for gather codecs, the rank (parallel::codec_seed), as the
// data-parallel reducer's. Not for "none" (the callers keep their exact f32 path) nor PowerSGD
// (the config refuses it: a model delta has no tensor shapes shared by a synchronous allreduce).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/compress/codec.h"
#include "dtrain/compress/codec_spec.h"
#include "dtrain/compress/error_feedback.h"

namespace dtrain::train {

class CompressedMean {
 public:
  // `spec`: neither none nor powersgd (InternalError). n: the vector's length.
  CompressedMean(comm::Communicator& comm, const compress::CodecSpec& spec, std::int64_t n,
                 std::uint64_t seed);

  // values (n) <- mean over the ranks of decode(encode(values_r [+ residual_r])). Collective.
  void mean(float* values);

  const compress::CodecSpec& spec() const { return spec_; }
  const compress::Codec& codec() const { return *codec_; }
  // The codec's payload for n elements.
  std::size_t payload_bytes() const { return codec_->encoded_bytes(n_); }
  // Bytes sent per rank and call by the formula (ring collectives), and the formula.
  double predicted_bytes() const;
  std::string formula() const;
  // Calls so far (the seeds derive from it); set back from a checkpoint.
  std::int64_t calls() const { return calls_; }
  void set_calls(std::int64_t calls) { calls_ = calls; }
  // This rank's error-feedback residual (empty without error feedback).
  std::vector<float> residual() const;
  void set_residual(const std::vector<float>& values);

 private:
  comm::Communicator& comm_;
  compress::CodecSpec spec_;
  std::unique_ptr<compress::Codec> codec_;
  std::int64_t n_;
  std::uint64_t seed_;
  std::int64_t calls_ = 0;
  std::optional<compress::ErrorFeedback> feedback_;
  std::vector<std::uint8_t> payload_;
  std::vector<std::uint8_t> gathered_;
  std::vector<float> sent_;
};

}  // namespace dtrain::train
