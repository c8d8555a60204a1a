// ZeRO-1 shards: every parameter belongs to exactly one rank, each piece keeps its tensor's name
// and weight-decay flag, and the state expands to the model's layout and packs back.
#include "dtrain/parallel/optimizer_shards.h"

#include <gtest/gtest.h>

#include "dtrain/base/error.h"
#include "dtrain/comm/algorithms/blocks.h"

namespace dtrain::parallel {
namespace {

// fc1 (w 100, b 10), fc2 (w 50, b 5), fc3 (w 20, b 2); biases without weight decay.
std::vector<nn::ParamEntry> three_layers() {
  std::vector<nn::ParamEntry> entries;
  const std::int64_t sizes[] = {100, 10, 50, 5, 20, 2};
  const char* names[] = {"fc1.weight", "fc1.bias",   "fc2.weight",
                         "fc2.bias",   "fc3.weight", "fc3.bias"};
  std::int64_t offset = 0;
  for (int i = 0; i < 6; ++i) {
    entries.push_back({names[i], offset, {sizes[i]}, sizes[i], i % 2 == 0});
    offset += sizes[i];
  }
  return entries;
}

TEST(OptimizerShardsTest, EveryParameterHasOneOwnerAndKeepsItsTensorsFlags) {
  const auto entries = three_layers();
  const std::vector<std::size_t> layers = {0, 0, 1, 1, 2, 2};
  for (std::int64_t fusion : {std::int64_t{0}, std::int64_t{100}, std::int64_t{1} << 20}) {
    const auto buckets = make_gradient_buckets(entries, layers, fusion);
    for (int ranks : {1, 2, 3, 4, 7, 200}) {
      std::vector<int> owner(187, -1);
      for (int rank = 0; rank < ranks; ++rank) {
        const auto segments = shard_segments(entries, buckets, rank, ranks);
        std::int64_t previous_end = 0;
        for (const auto& segment : segments) {
          EXPECT_GT(segment.numel, 0);
          EXPECT_GE(segment.offset, previous_end) << "sorted, not overlapping";
          previous_end = segment.offset + segment.numel;
          // Inside one tensor, with its name and flag.
          const nn::ParamEntry* tensor = nullptr;
          for (const auto& entry : entries) {
            if (segment.offset >= entry.offset && segment.offset < entry.offset + entry.numel) {
              tensor = &entry;
            }
          }
          ASSERT_NE(tensor, nullptr);
          EXPECT_EQ(segment.name, tensor->name);
          EXPECT_EQ(segment.weight_decay, tensor->weight_decay);
          EXPECT_LE(segment.offset + segment.numel, tensor->offset + tensor->numel);
          for (std::int64_t i = segment.offset; i < segment.offset + segment.numel; ++i) {
            EXPECT_EQ(owner[static_cast<std::size_t>(i)], -1) << "element " << i << " twice";
            owner[static_cast<std::size_t>(i)] = rank;
          }
        }
      }
      // Owned exactly once, and by the rank that reduce_scatter_blocks leaves it reduced at.
      for (const auto& bucket : buckets) {
        for (std::int64_t i = 0; i < bucket.count; ++i) {
          int expected = 0;
          while (i >= comm::block_begin(bucket.count, ranks, expected + 1)) ++expected;
          EXPECT_EQ(owner[static_cast<std::size_t>(bucket.offset + i)], expected)
              << "fusion " << fusion << ", " << ranks << " ranks, element " << bucket.offset + i;
        }
      }
    }
  }
}

TEST(OptimizerShardsTest, StateExpandsToTheModelLayoutAndPacksBack) {
  const std::vector<optim::Segment> shard = {{"a", 2, 3, true}, {"b", 7, 2, false}};
  const std::vector<float> packed = {1, 2, 3, 4, 5};
  const std::vector<float> full = expand_state(shard, packed, 10);
  EXPECT_EQ(full, (std::vector<float>{0, 0, 1, 2, 3, 0, 0, 4, 5, 0}));
  EXPECT_EQ(pack_state(shard, full), packed);
  EXPECT_THROW(expand_state(shard, packed, 8), Error);
  EXPECT_THROW(pack_state(shard, std::vector<float>(8)), Error);
}

}  // namespace
}  // namespace dtrain::parallel
