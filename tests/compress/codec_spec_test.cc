// The catalog's parser (codec_spec.h): accepted specs, their canonical text, exchange and error
// feedback defaults; bad input is one ConfigError line that names the accepted values.
#include "dtrain/compress/codec_spec.h"

#include <gtest/gtest.h>

#include "dtrain/base/error.h"

namespace dtrain::compress {
namespace {

TEST(CodecSpec, ParsesTheCatalog) {
  struct Case {
    const char* text;
    CodecKind kind;
    Exchange exchange;
    bool error_feedback;
  };
  const Case cases[] = {
      {"none", CodecKind::kNone, Exchange::kSummable, false},
      {"fp16", CodecKind::kFp16, Exchange::kSummable, false},
      {"bf16", CodecKind::kBf16, Exchange::kSummable, false},
      {"sign", CodecKind::kSign, Exchange::kGather, true},
      {"qsgd:8", CodecKind::kQsgd, Exchange::kGather, false},
      {"topk:0.01", CodecKind::kTopk, Exchange::kGather, true},
      {"topk:1000", CodecKind::kTopk, Exchange::kGather, true},
      {"randomk:0.01", CodecKind::kRandomk, Exchange::kSummable, true},
      {"powersgd:2", CodecKind::kPowerSgd, Exchange::kLowRank, true},
  };
  for (const Case& c : cases) {
    const CodecSpec spec = parse_codec(c.text);
    EXPECT_EQ(spec.kind, c.kind) << c.text;
    EXPECT_EQ(spec.text(), c.text);
    EXPECT_EQ(spec.exchange(), c.exchange) << c.text;
    EXPECT_EQ(spec.error_feedback, c.error_feedback) << c.text;
    const auto codec = make_codec(spec);
    const bool plain = c.kind != CodecKind::kNone && c.kind != CodecKind::kPowerSgd;
    ASSERT_EQ(codec != nullptr, plain) << c.text;
    if (plain) {
      EXPECT_EQ(codec->name(), c.text);
      EXPECT_EQ(codec->exchange(), c.exchange);
    }
  }
  EXPECT_EQ(parse_codec("topk:1").keep.k, 1);          // an integer is a count
  EXPECT_EQ(parse_codec("topk:1.0").keep.ratio, 1.0);  // a '.' makes a ratio
  EXPECT_EQ(parse_codec("topk:1.0").text(), "topk:1.0");
  EXPECT_EQ(parse_codec("randomk:1e-3").keep.ratio, 1e-3);
  EXPECT_EQ(parse_codec("qsgd:16").bits, 16);
  EXPECT_EQ(parse_codec("qsgd:2").bits, 2);
}

TEST(CodecSpec, BadInputIsOneLineNamingTheAcceptedValues) {
  for (const char* text :
       {"",         "zip",      "topk",     "topk:",      "topk:0",      "topk:-3",
        "topk:0.0", "topk:1.5", "topk:abc", "topk:0.01x", "randomk:2.0", "qsgd:1",
        "qsgd:17",  "qsgd:0",   "qsgd:4.5", "powersgd:0", "powersgd:-1", "powersgd",
        "fp16:2",   "none:1",   "sign:x",   "topk:nan",   "topk:inf"}) {
    try {
      parse_codec(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const ConfigError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      EXPECT_NE(message.find(accepted_codecs()), std::string::npos) << message;
      EXPECT_NE(message.find(std::string("'") + text + "'"), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace dtrain::compress
