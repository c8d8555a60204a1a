// Optimizer::step_range (optimizer.h): an update done in parts, each reading its gradients from a
// buffer of its own, gives the same bits as step() (SGD); the other rules refuse.
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

void expect_parts_match_step(const OptimizerConfig& config) {
  SCOPED_TRACE(config.name);
  auto whole = make_optimizer(config, segments());
  auto parts = make_optimizer(config, segments());
  std::vector<float> p_whole = values(110, 2.0f, -1.0f);
  std::vector<float> p_parts = p_whole;
  // Part borders inside segments, on a segment border, in the gap, and past the end.
  const std::vector<std::int64_t> borders = {0, 10, 43, 50, 61, 98, 120};
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> grads = values(110, 1.0f, -0.5f + 0.1f * static_cast<float>(step));
    const double lr = 0.05 * (step + 1);
    whole->step(p_whole.data(), grads.data(), lr);
    for (std::size_t i = 0; i + 1 < borders.size(); ++i) {
      const std::int64_t begin = borders[i];
      const std::int64_t end = borders[i + 1];
      std::vector<float> chunk(static_cast<std::size_t>(end - begin), 99.0f);
      for (std::int64_t k = begin; k < std::min<std::int64_t>(end, 110); ++k) {
        chunk[static_cast<std::size_t>(k - begin)] = grads[static_cast<std::size_t>(k)];
      }
      parts->step_range(p_parts.data(), chunk.data(), lr, begin, end);
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
  expect_parts_match_step(sgd);
  sgd.momentum = 0.9;
  expect_parts_match_step(sgd);
  sgd.nesterov = true;
  expect_parts_match_step(sgd);
  EXPECT_TRUE(make_optimizer(sgd, segments())->updates_in_parts());
}

TEST(StepRange, OnlySgdUpdatesInParts) {
  for (const std::string name : {"lars", "adam", "adamw"}) {
    OptimizerConfig config;
    config.name = name;
    auto optimizer = make_optimizer(config, segments());
    EXPECT_FALSE(optimizer->updates_in_parts()) << name;
    std::vector<float> p(110, 1.0f), g(110, 0.5f);
    EXPECT_THROW(optimizer->step_range(p.data(), g.data(), 0.1, 0, 110), InternalError) << name;
  }
}

}  // namespace
}  // namespace dtrain::optim
