// What every codec of the catalog owes (codec.h), at the odd sizes n = 1, 7, 1000003 and more:
// encode writes exactly encoded_bytes(n) bytes (no byte past them, every byte of them
// deterministic), decode writes all n outputs, decode_add adds decode to what is there, and the
// same (x, seed) gives the same payload.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/compress/codec_spec.h"
#include "random_values.h"

namespace dtrain::compress {
namespace {

const char* const kCodecs[] = {"fp16",   "bf16",        "sign",     "qsgd:2",
                               "qsgd:5", "qsgd:8",      "qsgd:16",  "topk:0.01",
                               "topk:3", "randomk:0.1", "randomk:5"};
const std::int64_t kSizes[] = {1, 7, 8, 255, 256, 257, 1000, 1000003};

class CodecCatalog : public ::testing::TestWithParam<std::tuple<const char*, std::int64_t>> {};

TEST_P(CodecCatalog, EncodesExactlyItsDeclaredBytesAndDecodesEveryElement) {
  const auto [text, n] = GetParam();
  const auto codec = make_codec(parse_codec(text));
  ASSERT_NE(codec, nullptr);
  EXPECT_EQ(codec->name(), text);
  const std::vector<float> x = testing::random_values(n, 3);
  const std::size_t bytes = codec->encoded_bytes(n);
  EXPECT_EQ(codec->wire_count(n) * static_cast<std::int64_t>(dtype_size(codec->wire_dtype())),
            static_cast<std::int64_t>(bytes));
  // Two payload buffers with different fill and a guard past the end: the payloads must agree
  // (every byte written, and deterministic) and the guards stay untouched.
  constexpr std::size_t kGuard = 64;
  std::vector<std::uint8_t> a(bytes + kGuard, 0x00), b(bytes + kGuard, 0xff);
  codec->encode(x.data(), n, a.data(), 17);
  codec->encode(x.data(), n, b.data(), 17);
  for (std::size_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(a[bytes + i], 0x00) << text << " wrote byte " << bytes + i << " of " << bytes;
    ASSERT_EQ(b[bytes + i], 0xff) << text << " wrote byte " << bytes + i << " of " << bytes;
  }
  ASSERT_TRUE(std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(bytes), b.begin()))
      << text << ": a byte of the payload is not written, or not deterministic";

  // decode writes every element (a NaN fill would survive otherwise)...
  std::vector<float> decoded(static_cast<std::size_t>(n), std::nanf(""));
  codec->decode(a.data(), n, decoded.data(), 17);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_FALSE(std::isnan(decoded[i])) << text << " " << i;
  // ... and decode_add adds exactly that.
  std::vector<float> base = testing::random_values(n, 4);
  std::vector<float> added = base;
  codec->decode_add(a.data(), n, added.data(), 17);
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(added[i], base[i] + decoded[i]) << text << " element " << i;
  }
}

// "topk:0.01" x 7 -> "topk_0_01_n7".
std::string case_name(const ::testing::TestParamInfo<CodecCatalog::ParamType>& param) {
  std::string name = std::get<0>(param.param);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name + "_n" + std::to_string(std::get<1>(param.param));
}

INSTANTIATE_TEST_SUITE_P(EveryCodec, CodecCatalog,
                         ::testing::Combine(::testing::ValuesIn(kCodecs),
                                            ::testing::ValuesIn(kSizes)),
                         case_name);

}  // namespace
}  // namespace dtrain::compress
