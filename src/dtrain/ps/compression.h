// Compressed parameter-server traffic (docs/PS.md, "Compression"; codecs: docs/COMPRESSION.md).
//
// Pushes: each worker encodes the gradient of each server's shard with a codec of compress/ (with
// error feedback, the residual kept on the worker: one flat buffer with the parameters' layout, a
// shard a range of it); the server decodes it and applies it (bsp: decode_add into the step's sum;
// async / ssp: decode, then the optimizer step). Every codec that one message can carry works:
// fp16, bf16, sign, qsgd:B, topk:R, randomk:R. PowerSGD does not: its P and Q are sums over the
// workers between two rounds (an allreduce, orthogonalize, another allreduce), which a push of one
// worker to a server has no way to form; it is refused with that reason.
//
// Pulls: fp16 or bf16 only. A pull sends the parameters, not a gradient: a sparsifier or sign would
// send the worker a different model each step, and error feedback would need a residual per worker
// on the server (what the worker has not yet received). A cast loses 2^-11 (fp16) or 2^-8 (bf16)
// relative per parameter and nothing accumulates: the servers keep the f32 master copy and every
// pull casts it again. get() (evaluation, checkpoints) stays f32.
//
// Bytes per push of a worker, for S servers holding n_s keys each (header: sizeof(RequestHeader)):
//   sum_s (header + encoded_bytes(n_s))      none: encoded_bytes(n) = 4n
// and per reply that carries parameters: sum_s (sizeof(ReplyHeader) + pull_bytes(n_s)), with
// pull_bytes(n) = 4n (none) or 2n (fp16, bf16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dtrain/compress/codec_spec.h"
#include "dtrain/ps/shard_layout.h"

namespace dtrain::ps {

struct Compression {
  compress::CodecSpec push;  // none: f32 pushes
  compress::CodecSpec pull;  // none, fp16 or bf16
  std::uint64_t seed = 0;    // the run's: a push's seed is derived from it (push_seed)

  bool pushes_encoded() const { return push.kind != compress::CodecKind::kNone; }
  bool pulls_encoded() const { return pull.kind != compress::CodecKind::kNone; }
};

// ConfigError, one line, for a push codec a server cannot decode (powersgd) or a pull codec that is
// not none, fp16 or bf16; `push_key` / `pull_key` name where they came from.
void check_compression(const Compression& compression, const std::string& push_key,
                       const std::string& pull_key);

// Payload bytes for n keys: encoded_bytes(n), 4n for none.
std::size_t push_payload_bytes(const compress::CodecSpec& spec, std::int64_t n);
std::size_t pull_payload_bytes(const compress::CodecSpec& spec, std::int64_t n);

// The bytes a worker sends per push of all keys and receives per reply with all parameters (the
// formulas above, headers included).
std::int64_t predicted_push_bytes(const Compression& compression, const ShardLayout& layout);
std::int64_t predicted_pull_bytes(const Compression& compression, const ShardLayout& layout);
// "S x (72 + 8k) B: topk:0.01 of n_s = 89774 keys, k = 898"-style: the formula with its values.
std::string push_bytes_formula(const Compression& compression, const ShardLayout& layout);
std::string pull_bytes_formula(const Compression& compression, const ShardLayout& layout);

// The seed worker `worker` encodes its push of `clock` to `server` with; sent in the request
// header, so the server decodes with the encoder's seed (random-k's indices, QSGD's dithering).
std::uint64_t push_seed(std::uint64_t seed, int worker, std::int64_t clock, int server);

}  // namespace dtrain::ps
