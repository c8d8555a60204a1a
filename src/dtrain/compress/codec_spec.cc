#include "dtrain/compress/codec_spec.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>

#include "dtrain/base/error.h"
#include "dtrain/compress/bf16_codec.h"
#include "dtrain/compress/fp16_codec.h"
#include "dtrain/compress/qsgd_codec.h"
#include "dtrain/compress/randomk_codec.h"
#include "dtrain/compress/sign_codec.h"
#include "dtrain/compress/topk_codec.h"

namespace dtrain::compress {
namespace {

constexpr std::int64_t kNoLimit = std::numeric_limits<int>::max();

[[noreturn]] void reject(std::string_view text, std::string_view why) {
  throw ConfigError(
      fmt::format("compression '{}': {}; accepted: {}", text, why, accepted_codecs()));
}

// A whole decimal integer; false for anything else.
bool parse_int(std::string_view s, std::int64_t& value) {
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  return error == std::errc() && end == s.data() + s.size();
}

// "0.01" -> ratio, "1000" -> k: a '.' or an exponent makes it a ratio.
KeepCount parse_keep(std::string_view text, std::string_view value) {
  KeepCount keep;
  if (value.find_first_of(".eE") != std::string_view::npos) {
    const auto [end, error] =
        std::from_chars(value.data(), value.data() + value.size(), keep.ratio);
    if (error != std::errc() || end != value.data() + value.size() || !std::isfinite(keep.ratio)) {
      reject(text, fmt::format("'{}' is not a number", value));
    }
    if (!(keep.ratio > 0.0 && keep.ratio <= 1.0)) {
      reject(text, fmt::format("ratio {} outside (0, 1]", value));
    }
    return keep;
  }
  if (!parse_int(value, keep.k)) reject(text, fmt::format("'{}' is not a number", value));
  if (keep.k < 1) reject(text, fmt::format("k = {}, must be >= 1", keep.k));
  return keep;
}

int parse_bounded(std::string_view text, std::string_view value, std::string_view what,
                  std::int64_t low, std::int64_t high) {
  std::int64_t v = 0;
  if (!parse_int(value, v)) reject(text, fmt::format("{} '{}' is not an integer", what, value));
  if (v < low || v > high) {
    reject(text, high == kNoLimit ? fmt::format("{} {} must be >= {}", what, v, low)
                                  : fmt::format("{} {} outside {}..{}", what, v, low, high));
  }
  return static_cast<int>(v);
}

}  // namespace

std::string accepted_codecs() {
  return "none, fp16, bf16, sign, qsgd:<bits 2..16>, topk:<ratio in (0, 1] or k >= 1>, "
         "randomk:<ratio in (0, 1] or k >= 1>, powersgd:<rank >= 1>";
}

CodecSpec parse_codec(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const bool has_value = colon != std::string_view::npos;
  const std::string_view value = has_value ? text.substr(colon + 1) : std::string_view();
  CodecSpec spec;
  const bool plain = name == "none" || name == "fp16" || name == "bf16" || name == "sign";
  const bool parameterized =
      name == "qsgd" || name == "topk" || name == "randomk" || name == "powersgd";
  if (!plain && !parameterized) reject(text, fmt::format("unknown codec '{}'", name));
  if (plain && has_value) reject(text, fmt::format("{} takes no parameter", name));
  if (parameterized && value.empty()) reject(text, fmt::format("{} needs a parameter", name));
  if (name == "none") {
    spec.kind = CodecKind::kNone;
  } else if (name == "fp16") {
    spec.kind = CodecKind::kFp16;
  } else if (name == "bf16") {
    spec.kind = CodecKind::kBf16;
  } else if (name == "sign") {
    spec.kind = CodecKind::kSign;
    spec.error_feedback = true;
  } else if (name == "qsgd") {
    spec.kind = CodecKind::kQsgd;
    spec.bits = parse_bounded(text, value, "bits", 2, 16);
  } else if (name == "topk" || name == "randomk") {
    spec.kind = name == "topk" ? CodecKind::kTopk : CodecKind::kRandomk;
    spec.keep = parse_keep(text, value);
    spec.error_feedback = true;
  } else {
    spec.kind = CodecKind::kPowerSgd;
    spec.rank = parse_bounded(text, value, "rank", 1, kNoLimit);
    spec.error_feedback = true;
  }
  return spec;
}

std::string CodecSpec::text() const {
  switch (kind) {
    case CodecKind::kNone: return "none";
    case CodecKind::kFp16: return "fp16";
    case CodecKind::kBf16: return "bf16";
    case CodecKind::kSign: return "sign";
    case CodecKind::kQsgd: return fmt::format("qsgd:{}", bits);
    case CodecKind::kTopk: return "topk:" + keep.text();
    case CodecKind::kRandomk: return "randomk:" + keep.text();
    case CodecKind::kPowerSgd: return fmt::format("powersgd:{}", rank);
  }
  return "?";
}

Exchange CodecSpec::exchange() const {
  switch (kind) {
    case CodecKind::kSign:
    case CodecKind::kQsgd:
    case CodecKind::kTopk: return Exchange::kGather;
    case CodecKind::kPowerSgd: return Exchange::kLowRank;
    default: return Exchange::kSummable;
  }
}

std::unique_ptr<Codec> make_codec(const CodecSpec& spec) {
  switch (spec.kind) {
    case CodecKind::kFp16: return std::make_unique<Fp16Codec>();
    case CodecKind::kBf16: return std::make_unique<Bf16Codec>();
    case CodecKind::kSign: return std::make_unique<SignCodec>();
    case CodecKind::kQsgd: return std::make_unique<QsgdCodec>(spec.bits);
    case CodecKind::kTopk: return std::make_unique<TopkCodec>(spec.keep);
    // Unscaled under error feedback (a contraction), scaled (unbiased) without it.
    case CodecKind::kRandomk:
      return std::make_unique<RandomkCodec>(spec.keep, /*scaled=*/!spec.error_feedback);
    case CodecKind::kNone:
    case CodecKind::kPowerSgd: return nullptr;
  }
  return nullptr;
}

}  // namespace dtrain::compress
