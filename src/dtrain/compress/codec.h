// Codec: a gradient compressor over raw float buffers (GRACE's Compressor; docs/COMPRESSION.md).
//
// A codec turns n floats into a payload of exactly encoded_bytes(n) bytes and back. How ranks
// exchange payloads is a property of the codec, because it decides the collective:
//
//   kSummable  payloads add element-wise in wire_dtype() (fp16, bf16; random-k with indices that
//              every rank draws from the same seed): one allreduce of the payloads, then one
//              decode of the sum. Cost per rank: the allreduce's, 2 (P-1)/P x encoded_bytes(n) for
//              ring.
//   kGather    payloads do not add (top-k's indices differ per rank, QSGD's and sign's scales
//              differ): an allgather of the payloads, then every rank decodes and adds the P
//              payloads in rank order, so every rank holds the bit-identical sum. Cost per rank:
//              (P-1) x encoded_bytes(n) sent for ring, P decodes.
//   kLowRank   PowerSGD (powersgd.h): not a Codec, because it is stateful and its exchange is two
//              allreduces with an orthogonalization between them.
//
// Randomness is explicit: encode and decode take a seed, and a codec is a pure function of
// (input, seed). Stochastic codecs (QSGD's dithering, random-k's indices) therefore run the same
// in every run, and ranks agree where they must (random-k's indices come from a seed all ranks
// share). Deterministic codecs ignore the seed.
//
// Codecs are immutable after construction; encode and decode may run on several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dtrain/base/dtype.h"

namespace dtrain::compress {

enum class Exchange { kSummable, kGather, kLowRank };

// "allreduce", "allgather", "two allreduces".
const char* exchange_name(Exchange exchange);

class Codec {
 public:
  virtual ~Codec() = default;
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;

  // The spec string that parse_codec() turns into this codec ("topk:0.01"; codec_spec.h).
  virtual std::string name() const = 0;
  // kSummable or kGather.
  virtual Exchange exchange() const = 0;
  // The element type in which an allreduce sums the payload (kF16, kBF16, kF32) for a summable
  // codec; kU8 for a gather codec (the payload is opaque bytes).
  virtual DType wire_dtype() const = 0;
  // The exact payload size for n elements.
  virtual std::size_t encoded_bytes(std::int64_t n) const = 0;
  // The payload as a count of wire_dtype() elements: encoded_bytes(n) / dtype_size(wire_dtype()).
  std::int64_t wire_count(std::int64_t n) const;

  // x: (n) -> out: (encoded_bytes(n)).
  virtual void encode(const float* x, std::int64_t n, std::uint8_t* out,
                      std::uint64_t seed) const = 0;
  // in: (encoded_bytes(n)) -> out: (n), every element written. `seed`: the encoder's.
  virtual void decode(const std::uint8_t* in, std::int64_t n, float* out,
                      std::uint64_t seed) const = 0;
  // out += decode(in): what a receiver summing the payloads of P ranks runs once per rank.
  virtual void decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                          std::uint64_t seed) const = 0;

 protected:
  Codec() = default;
};

}  // namespace dtrain::compress
