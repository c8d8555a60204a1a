// data_parallel.momentum_correction (DGC; docs/COMPRESSION.md) is refused, naming the key and what
// it needs, where it cannot work: a codec that is not a sparsifier or PowerSGD (none, casts, sign,
// QSGD), error feedback off, an optimizer other than SGD, or SGD's own momentum still on.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/train/config.h"

namespace dtrain::train {
namespace {

TEST(MomentumCorrectionConfig, NeedsACodecWithErrorFeedbackAndNoOptimizerMomentum) {
  const std::vector<std::vector<std::string>> bad = {
      {"data_parallel.compression=none"},
      {"data_parallel.compression=powersgd:2", "data_parallel.error_feedback=false"},
      {"data_parallel.compression=topk:0.01", "data_parallel.error_feedback=false"},
      {"data_parallel.compression=topk:0.01", "optim.momentum=0.9"},
      // A cast or sign sends every element: factor masking would zero the momentum each step.
      {"data_parallel.compression=fp16"},
      {"data_parallel.compression=sign"},
      // Adam keeps its own moments.
      {"data_parallel.compression=topk:0.01", "optim.name=adam"}};
  for (const auto& overrides : bad) {
    Config config;
    config.optim.momentum = 0.0;
    apply_override(config, "data_parallel.momentum_correction=0.9");
    for (const std::string& o : overrides) apply_override(config, o);
    try {
      validate(config);
      ADD_FAILURE() << overrides.back() << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("data_parallel.momentum_correction"), std::string::npos)
          << e.what();
    }
  }
  for (const char* codec : {"topk:0.01", "randomk:0.01", "powersgd:2"}) {
    Config good;
    good.optim.momentum = 0.0;
    apply_override(good, std::string("data_parallel.compression=") + codec);
    apply_override(good, "data_parallel.momentum_correction=0.9");
    EXPECT_NO_THROW(validate(good)) << codec;
  }
}

}  // namespace
}  // namespace dtrain::train
