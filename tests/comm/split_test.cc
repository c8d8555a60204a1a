// Communicator::split: colors and keys, the undefined color, nested splits, and sub-communicators
// running collectives at the same time as their parent and their siblings without mixing traffic.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "comm_test_values.h"
#include "dtrain/base/error.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/comm/transport/sub_transport.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;

CommOptions test_options() {
  CommOptions options;
  options.timeout = 20s;
  options.segment_bytes = 512;
  return options;
}

class SplitTest : public ::testing::TestWithParam<int> {};

TEST_P(SplitTest, ColorsGroupRanksOrderedByKeyThenRank) {
  const int ranks = GetParam();
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        // Three colors by rank mod 3; keys reverse the order, with ties (key = rank / 2 reversed)
        // broken by the old rank.
        const int color = comm.rank() % 3;
        const int key = -(comm.rank() / 2);
        auto sub = comm.split(color, key);
        ASSERT_NE(sub, nullptr);
        std::vector<int> members;
        for (int r = 0; r < ranks; ++r) {
          if (r % 3 == color) members.push_back(r);
        }
        std::stable_sort(members.begin(), members.end(),
                         [](int a, int b) { return -(a / 2) < -(b / 2); });
        ASSERT_EQ(sub->size(), static_cast<int>(members.size()));
        EXPECT_EQ(members[static_cast<std::size_t>(sub->rank())], comm.rank());
        EXPECT_NE(sub->id(), comm.id());
        EXPECT_EQ(sub->options().segment_bytes, comm.options().segment_bytes);
        // Allreduce in the child over its members only: the sum of their old ranks, and the
        // closed-form sweep values indexed by the new rank.
        std::int64_t sum = comm.rank();
        sub->allreduce(&sum, 1, DType::kI64, ReduceOp::kSum);
        std::int64_t expect = 0;
        for (int m : members) expect += m;
        EXPECT_EQ(sum, expect);
        for (const char* algorithm : {"ring", "halving-doubling", "double-binary-tree"}) {
          CollectiveOptions call;
          call.algorithm = algorithm;
          const std::int64_t count = 301;
          auto data = testing::make_buffer(count, DType::kF32);
          testing::fill_contribution(data, sub->rank(), sub->size(), count, DType::kF32,
                                     ReduceOp::kMax);
          sub->allreduce(data.data(), count, DType::kF32, ReduceOp::kMax, call);
          EXPECT_EQ(
              testing::first_mismatch(data.data(), sub->size(), count, DType::kF32, ReduceOp::kMax),
              -1)
              << algorithm;
        }
        // Point-to-point inside the child addresses child ranks.
        if (sub->size() > 1) {
          const int next = (sub->rank() + 1) % sub->size();
          const int prev = (sub->rank() + sub->size() - 1) % sub->size();
          std::int32_t out = comm.rank();
          std::int32_t in = -1;
          if (sub->rank() % 2 == 0) {
            sub->send(&out, 1, DType::kI32, next, 5);
            sub->recv(&in, 1, DType::kI32, prev, 5);
          } else {
            sub->recv(&in, 1, DType::kI32, prev, 5);
            sub->send(&out, 1, DType::kI32, next, 5);
          }
          EXPECT_EQ(in, members[static_cast<std::size_t>(prev)]);
        }
        EXPECT_EQ(comm.stats().get("split").calls, 1);
      },
      test_options());
}

TEST_P(SplitTest, UndefinedColorReturnsNullAndOthersStillSplit) {
  const int ranks = GetParam();
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        const bool joins = comm.rank() % 2 == 1;
        auto sub = comm.split(joins ? 7 : kUndefinedColor, comm.rank());
        if (!joins) {
          EXPECT_EQ(sub, nullptr);
          return;
        }
        ASSERT_NE(sub, nullptr);
        EXPECT_EQ(sub->size(), ranks / 2);
        EXPECT_EQ(sub->rank(), comm.rank() / 2);
        float x = 1.0f;
        sub->allreduce(&x, 1, DType::kF32, ReduceOp::kSum);
        EXPECT_EQ(x, static_cast<float>(ranks / 2));
      },
      test_options());
}

TEST_P(SplitTest, SplitOfASplitAndIdsThatNeverCollide) {
  const int ranks = GetParam();
  std::mutex mu;
  // (world rank, communicator id) of every communicator each rank belongs to.
  std::vector<std::set<std::uint64_t>> ids(static_cast<std::size_t>(ranks));
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        auto halves = comm.split(comm.rank() < ranks / 2 ? 0 : 1, comm.rank());
        auto quarters = halves->split(halves->rank() % 2, halves->rank());
        auto again = comm.split(comm.rank() % 2, 0);  // overlaps both halves and quarters
        for (Communicator* c : {&comm, halves.get(), quarters.get(), again.get()}) {
          std::lock_guard<std::mutex> lock(mu);
          ids[static_cast<std::size_t>(comm.rank())].insert(c->id());
        }
        // Every communicator a rank is in has its own id (the tags stay apart).
        EXPECT_EQ(ids[static_cast<std::size_t>(comm.rank())].size(), 4u);
        // The quarter's members, by world rank: halves then parity inside the half.
        std::int64_t world = comm.rank();
        std::vector<std::int64_t> gathered(static_cast<std::size_t>(quarters->size()));
        quarters->allgather(&world, gathered.data(), 1, DType::kI64);
        for (std::int64_t w : gathered) {
          EXPECT_EQ(w < ranks / 2, comm.rank() < ranks / 2);
          const std::int64_t half_rank = w < ranks / 2 ? w : w - ranks / 2;
          EXPECT_EQ(half_rank % 2, halves->rank() % 2);
        }
        std::int64_t total = 1;
        again->allreduce(&total, 1, DType::kI64, ReduceOp::kSum);
        EXPECT_EQ(total, comm.rank() % 2 == 0 ? (ranks + 1) / 2 : ranks / 2);
      },
      test_options());
}

TEST_P(SplitTest, ParentAndChildrenRunCollectivesAtTheSameTime) {
  const int ranks = GetParam();
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        auto child = comm.split(comm.rank() % 2, comm.rank());
        // The same sequence numbers, tags and sizes in flight on parent and child at once: only
        // the communicator id keeps them apart.
        std::vector<float> parent_data(5000, 1.0f);
        std::vector<float> child_data(5000, 2.0f);
        std::vector<Work> works;
        for (int i = 0; i < 3; ++i) {
          works.push_back(
              comm.allreduce_async(parent_data.data(), 5000, DType::kF32, ReduceOp::kMax));
          works.push_back(
              child->allreduce_async(child_data.data(), 5000, DType::kF32, ReduceOp::kSum));
        }
        std::vector<std::int32_t> blocking(64, comm.rank());
        child->allreduce(blocking.data(), 64, DType::kI32, ReduceOp::kMin);
        comm.barrier();
        for (const Work& w : works) w.wait(20s);
        EXPECT_EQ(parent_data, std::vector<float>(5000, 1.0f));
        // Three sums over the child's members: 2 x size^3.
        const float n = static_cast<float>(child->size());
        EXPECT_EQ(child_data, std::vector<float>(5000, 2.0f * n * n * n));
        EXPECT_EQ(blocking, std::vector<std::int32_t>(64, comm.rank() % 2));
      },
      test_options());
}

INSTANTIATE_TEST_SUITE_P(Ranks, SplitTest, ::testing::Values(1, 2, 3, 4, 5, 7, 8, 9, 16),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return fmt::format("P{}", param_info.param);
                         });

TEST(SplitTest, ChildOptionsCanDifferAndTheChildChecksItsOwnHeaders) {
  CommOptions parent = test_options();
  spawn_ranks(
      4,
      [&](Communicator& comm) {
        CommOptions options = test_options();
        options.allreduce_algorithm = "tree";
        options.timeout = 300ms;
        auto child = comm.split(0, comm.rank(), options);
        EXPECT_EQ(child->options().allreduce_algorithm, "tree");
        // A mismatch inside the child is caught by the child's own header check.
        float x[2] = {0, 0};
        try {
          child->allreduce(x, child->rank() == 3 ? 2 : 1, DType::kF32, ReduceOp::kSum);
          ADD_FAILURE() << "expected a header mismatch";
        } catch (const CommError& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("count"), std::string::npos) << what;
          EXPECT_NE(what.find(fmt::format("rank {} of communicator {} (world rank {})",
                                          child->rank(), child->id(), comm.rank())),
                    std::string::npos)
              << what;
        }
      },
      parent);
}

TEST(SubTransportTest, RejectsBadMembersAndIds) {
  spawn_ranks(2, [](Communicator& comm) {
    auto world = std::shared_ptr<Transport>(&comm.transport(), [](Transport*) {});
    EXPECT_THROW(SubTransport::create(world, {0, 0}, 1), ConfigError);
    EXPECT_THROW(SubTransport::create(world, {0, 2}, 1), ConfigError);
    EXPECT_THROW(SubTransport::create(world, {1 - comm.rank()}, 1), ConfigError);
    EXPECT_THROW(SubTransport::create(world, {0, 1}, 0), ConfigError);
    EXPECT_THROW(SubTransport::create(world, {0, 1}, kMaxCommunicatorId + 1), ConfigError);
    auto view = SubTransport::create(world, {1, 0}, 9);
    EXPECT_EQ(view->rank(), 1 - comm.rank());
    EXPECT_EQ(view->world_rank(0), 1);
    EXPECT_EQ(view->name(), "inproc");
    EXPECT_FALSE(view->native_allreduce(nullptr, 0, DType::kF32, ReduceOp::kSum,
                                        std::chrono::steady_clock::now()));
    // A view of a view is flattened: ranks compose, the newest id wins.
    auto nested = SubTransport::create(view, {view->rank()}, 12);
    EXPECT_EQ(nested->size(), 1);
    EXPECT_EQ(nested->world_rank(0), comm.rank());
    EXPECT_EQ(nested->id(), 12u);
  });
}

}  // namespace
}  // namespace dtrain::comm
