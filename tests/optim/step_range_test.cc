// Optimizer::step_range (optimizer.h): an update done in parts, with the gradient the sum of one or
// more buffers read in the update's loop, gives the bits of step() on the summed gradient (SGD,
// Adam, AdamW); LARS refuses.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/optim/optimizer.h"

namespace dtrain::optim {
namespace {

// A shard-like layout: segments that do not start at 0, leave a gap, and mix weight decay.
std::vector<Segment> segments() {
  return {{"w1", 3, 40, true}, {"b1", 43, 5, false}, {"w2", 60, 37, true}, {"b2", 97, 2, false}};
}

std::vector<float> values(std::size_t n, float scale, float shift) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = scale * static_cast<float>((i * 37 + 11) % 23) / 23.0f + shift;
  }
  return v;
}

// `sources` gradient buffers per step; step() gets their left-to-right sum, step_range the
// buffers themselves, in parts.
void expect_parts_match_step(const OptimizerConfig& config, int sources) {
  SCOPED_TRACE(::testing::Message()
               << config.name << " momentum " << config.momentum << " nesterov " << config.nesterov
               << ", " << sources << " buffer(s)");
  auto whole = make_optimizer(config, segments());
  auto parts = make_optimizer(config, segments());
  std::vector<float> p_whole = values(110, 2.0f, -1.0f);
  std::vector<float> p_parts = p_whole;
  // Part borders inside segments, on a segment border, in the gap, and past the end.
  const std::vector<std::int64_t> borders = {0, 10, 43, 50, 61, 98, 110};
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<float>> buffers;
    std::vector<float> sum(110, 0.0f);
    for (int k = 0; k < sources; ++k) {
      buffers.push_back(values(110, 1.0f + 0.3f * static_cast<float>(k),
                               -0.5f + 0.1f * static_cast<float>(step + k)));
      for (std::size_t i = 0; i < sum.size(); ++i) {
        sum[i] = k == 0 ? buffers[0][i] : sum[i] + buffers.back()[i];
      }
    }
    std::vector<const float*> pointers;
    for (const auto& b : buffers) pointers.push_back(b.data());
    const double lr = 0.05 * (step + 1);
    whole->step(p_whole.data(), sum.data(), lr);
    for (std::size_t i = 0; i + 1 < borders.size(); ++i) {
      parts->step_range(p_parts.data(), pointers, lr, borders[i], borders[i + 1]);
    }
    parts->finish_step();
    ASSERT_EQ(p_parts, p_whole) << "after step " << step + 1;
  }
  EXPECT_EQ(parts->steps(), whole->steps());
  const auto a = whole->state();
  const auto b = parts->state();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].values, b[i].values) << a[i].name;
}

TEST(StepRange, PartsGiveTheBitsOfOneStep) {
  OptimizerConfig sgd;
  sgd.name = "sgd";
  sgd.weight_decay = 0.01;
  for (const double momentum : {0.0, 0.9}) {
    for (const bool nesterov : {false, true}) {
      if (nesterov && momentum == 0.0) continue;
      sgd.momentum = momentum;
      sgd.nesterov = nesterov;
      for (const int sources : {1, 2, 3}) expect_parts_match_step(sgd, sources);
    }
  }
  EXPECT_TRUE(updates_in_parts("sgd"));
}

// Adam's vector loop runs its last n % 8 elements masked (adam.cc), so parts cut anywhere, here
// at offsets that are not multiples of 8 from a range's start, give the bits of one step.
TEST(StepRange, AdamPartsGiveTheBitsOfOneStep) {
  for (const std::string name : {"adam", "adamw"}) {
    OptimizerConfig adam;
    adam.name = name;
    adam.weight_decay = 0.01;
    for (const int sources : {1, 2, 3}) expect_parts_match_step(adam, sources);
    EXPECT_TRUE(updates_in_parts(name));
  }
}

TEST(StepRange, LarsDoesNotUpdateInParts) {
  OptimizerConfig config;
  config.name = "lars";
  auto optimizer = make_optimizer(config, segments());
  EXPECT_FALSE(updates_in_parts("lars"));
  EXPECT_FALSE(updates_in_parts("no-such-optimizer"));
  std::vector<float> p(110, 1.0f), g(110, 0.5f);
  const std::vector<const float*> grads = {g.data()};
  EXPECT_THROW(optimizer->step_range(p.data(), grads, 0.1, 0, 110), InternalError);
}

}  // namespace
}  // namespace dtrain::optim
