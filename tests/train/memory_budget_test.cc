#include "dtrain/train/memory_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtrain/base/error.h"

namespace dtrain::train {
namespace {

using ::testing::HasSubstr;

AvailableMemory gib(std::int64_t n) { return {n << 30, "MemAvailable", true}; }

TEST(MemoryBudget, OptimizerStateCopies) {
  EXPECT_EQ(optimizer_state_copies("sgd", 0.0), 0);
  EXPECT_EQ(optimizer_state_copies("sgd", 0.9), 1);
  EXPECT_EQ(optimizer_state_copies("lars", 0.9), 1);
  EXPECT_EQ(optimizer_state_copies("adam", 0.0), 2);
  EXPECT_EQ(optimizer_state_copies("adamw", 0.0), 2);
}

TEST(MemoryBudget, PartsPerReplicaAndZeroShards) {
  MemoryNeed need;
  need.parameters = 1000;
  need.buffers = 10;
  need.optimizer_copies = 2;
  need.replicas = 3;
  MemoryParts parts = memory_parts(need);
  EXPECT_EQ(parts.parameters, 12000);
  EXPECT_EQ(parts.gradients, 12000);
  EXPECT_EQ(parts.buffers, 120);
  EXPECT_EQ(parts.optimizer, 24000);
  EXPECT_EQ(parts.total, 48120);
  need.optimizer_shards = 3;  // ZeRO-1: a third of the state each (rounded up)
  parts = memory_parts(need);
  EXPECT_EQ(parts.optimizer, 334 * 4 * 2 * 3);
}

TEST(MemoryBudget, UnderBudgetPasses) {
  MemoryNeed need;
  need.parameters = 100'000'000;  // 0.4 GB x 2
  EXPECT_FALSE(memory_shortfall(need, gib(1)).has_value());
  EXPECT_FALSE(memory_shortfall(need, AvailableMemory{}).has_value());  // unknown: not refused
}

TEST(MemoryBudget, OverBudgetNamesEachPartAndTheRemedy) {
  MemoryNeed need;
  need.parameters = 924'000'000;
  need.optimizer = "adam";
  need.optimizer_copies = 2;
  need.replicas = 2;
  need.world = 2;
  need.data_bytes = 219'800'000;
  const auto message = memory_shortfall(need, gib(8));
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(message->find('\n'), std::string::npos);
  EXPECT_THAT(*message, HasSubstr("924000000 parameters x 2 replicas"));
  EXPECT_THAT(*message, HasSubstr("parameters 6.88 GiB (7392000000 bytes)"));
  EXPECT_THAT(*message, HasSubstr("gradients 6.88 GiB (7392000000 bytes)"));
  EXPECT_THAT(*message, HasSubstr("optimizer state 13.77 GiB (14784000000 bytes) (adam, 2 copies"));
  EXPECT_THAT(*message, HasSubstr("= 27.54 GiB (29568000000 bytes)"));
  EXPECT_THAT(*message, HasSubstr("8.00 GiB (8589934592 bytes) are available (MemAvailable"));
  EXPECT_THAT(*message, HasSubstr("219800000 bytes"));
  EXPECT_THAT(*message, HasSubstr("fewer workers"));
  EXPECT_THAT(*message, HasSubstr("--zero-stage 1"));
}

TEST(MemoryBudget, EstimateFollowsTheConfig) {
  Config config;
  config.optim.name = "adam";
  config.parallel.workers = 4;
  nn::ModelSpec spec;
  spec.input = {784};
  spec.hidden = {100};
  const auto need = estimate_memory_need(config, spec, 4, 4, 0);
  ASSERT_TRUE(need.has_value());
  EXPECT_EQ(need->parameters, 785 * 100 + 101 * 10);
  EXPECT_EQ(need->optimizer_copies, 2);
  EXPECT_EQ(need->optimizer_shards, 4);  // auto: ZeRO-1 with ring, adam, 4 ranks
  config.data_parallel.zero_stage = "0";
  EXPECT_EQ(estimate_memory_need(config, spec, 4, 4, 0)->optimizer_shards, 1);
}

// The process that writes checkpoints holds, while one is written, its snapshot and its encoded
// bytes (2 copies of one replica's parameters, buffers and whole optimizer state), and the memory
// tier's two slots besides.
TEST(MemoryBudget, CheckpointCopiesAreCounted) {
  MemoryNeed need;
  need.parameters = 1000;
  need.buffers = 10;
  need.optimizer_copies = 2;
  need.optimizer_shards = 3;
  need.replicas = 3;
  need.checkpoint_copies = 2;
  const MemoryParts parts = memory_parts(need);
  EXPECT_EQ(parts.checkpoint, (4000 + 40 + 8000) * 2);  // unsharded: the checkpoint is whole
  EXPECT_EQ(parts.total, 12000 + 12000 + 120 + 334 * 4 * 2 * 3 + (4000 + 40 + 8000) * 2);

  Config config;
  nn::ModelSpec spec;
  spec.input = {784};
  spec.hidden = {100};
  EXPECT_EQ(estimate_memory_need(config, spec, 1, 1, 0, true)->checkpoint_copies, 2);
  EXPECT_EQ(estimate_memory_need(config, spec, 1, 1, 0, false)->checkpoint_copies, 0);
  config.train.memory_checkpoint_every_steps = 1;
  const auto tiered = estimate_memory_need(config, spec, 1, 1, 0, true);
  EXPECT_EQ(tiered->checkpoint_copies, 4);
  EXPECT_TRUE(tiered->memory_tier);
}

// Hogwild!'s linear model over 2e9 features: weights without gradients, and the checkpoint's two
// copies of them, named in the one-line refusal.
TEST(MemoryBudget, ALinearModelsWeightsAndCheckpointCopiesAreNamed) {
  MemoryNeed need;
  need.parameters = 2'000'000'000;
  need.gradients = false;
  need.checkpoint_copies = 2;
  const MemoryParts parts = memory_parts(need);
  EXPECT_EQ(parts.gradients, 0);
  EXPECT_EQ(parts.total, 3 * 8'000'000'000LL);
  const auto message = memory_shortfall(need, gib(21));
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(message->find('\n'), std::string::npos);
  EXPECT_THAT(*message, HasSubstr("need parameters 7.45 GiB (8000000000 bytes) + buffers"));
  EXPECT_THAT(*message, ::testing::Not(HasSubstr("gradients")));
  EXPECT_THAT(*message, HasSubstr("+ checkpoint copies 14.90 GiB (16000000000 bytes) (2 x 7.45 GiB "
                                  "(8000000000 bytes): the snapshot and its encoded bytes"));
  EXPECT_THAT(*message, HasSubstr("= 22.35 GiB (24000000000 bytes)"));
  EXPECT_THAT(*message, HasSubstr("fewer features"));
  EXPECT_FALSE(memory_shortfall(need, gib(23)).has_value());
}

TEST(MemoryBudget, HugeModelIsRefusedWithoutAllocating) {
  Config config;
  nn::ModelSpec spec;
  spec.hidden = {200000, 200000};  // 4e10 parameters: 160 GB each for parameters and gradients
  try {
    check_memory_budget(config, spec, 1, 1, 0);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the model does not fit in memory"));
  }
}

}  // namespace
}  // namespace dtrain::train
