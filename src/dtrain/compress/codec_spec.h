// The codec catalog by name: "none", "fp16", "bf16", "sign", "qsgd:<bits>", "topk:<ratio|k>",
// "randomk:<ratio|k>", "powersgd:<rank>" (docs/COMPRESSION.md has the table).
//
//   qsgd:b      b = 2..16 bits per element, the sign one of them (s = 2^(b-1) - 1 levels)
//   topk:x      x with a '.' or an exponent is a ratio in (0, 1] of each bucket ("topk:0.01");
//   randomk:x   an integer is a count k >= 1 ("topk:1000"; min(k, n) of a bucket of n)
//   powersgd:r  rank r >= 1
//
// Error feedback is on by default for the biased codecs, where the literature uses it: top-k,
// random-k (then unscaled), sign and PowerSGD; off for fp16, bf16 (errors of 2^-11 and 2^-8
// relative) and QSGD (unbiased). A caller may change `error_feedback` after parsing.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "dtrain/compress/codec.h"
#include "dtrain/compress/keep_count.h"

namespace dtrain::compress {

enum class CodecKind { kNone, kFp16, kBf16, kSign, kQsgd, kTopk, kRandomk, kPowerSgd };

struct CodecSpec {
  CodecKind kind = CodecKind::kNone;
  KeepCount keep;  // topk, randomk
  int bits = 0;    // qsgd
  int rank = 0;    // powersgd
  bool error_feedback = false;

  // The canonical spec string: parse_codec(text()) gives this spec back (error feedback aside).
  std::string text() const;
  // How the ranks exchange it (kSummable for none: a plain allreduce).
  Exchange exchange() const;
};

// Throws ConfigError, one line naming the accepted values, for an unknown name or a parameter out
// of range (k = 0, a ratio outside (0, 1], bits outside 2..16, rank < 1, a missing or extra one).
CodecSpec parse_codec(std::string_view text);

// The codec of a spec; null for none and powersgd (PowerSGD is stateful: powersgd.h).
std::unique_ptr<Codec> make_codec(const CodecSpec& spec);

// "none, fp16, bf16, sign, qsgd:<bits 2..16>, ...": the accepted values, for messages and --help.
std::string accepted_codecs();

}  // namespace dtrain::compress
