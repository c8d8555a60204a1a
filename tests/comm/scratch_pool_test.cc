#include "dtrain/comm/transport/scratch_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

namespace dtrain::comm {
namespace {

TEST(ScratchPool, ReusesAReturnedBuffer) {
  auto pool = ScratchPool::create();
  std::byte* first = nullptr;
  {
    ScratchPool::Lease lease = pool->acquire(1 << 20);
    first = lease.data();
    EXPECT_EQ(lease.size(), std::size_t{1} << 20);
    std::memset(lease.data(), 1, lease.size());  // the whole size is usable
  }
  EXPECT_EQ(pool->free_buffers(), 1u);
  EXPECT_EQ(pool->retained_bytes(), std::size_t{1} << 20);
  ScratchPool::Lease again = pool->acquire(1000);  // smaller requests take a larger buffer
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(again.size(), 1000u);
  EXPECT_EQ(pool->free_buffers(), 0u);
}

TEST(ScratchPool, OutstandingLeasesGetDistinctBuffers) {
  auto pool = ScratchPool::create();
  ScratchPool::Lease a = pool->acquire(4096);
  ScratchPool::Lease b = pool->acquire(4096);
  EXPECT_NE(a.data(), b.data());
}

TEST(ScratchPool, PicksTheSmallestBufferThatFits) {
  auto pool = ScratchPool::create();
  std::byte* small = nullptr;
  std::byte* large = nullptr;
  {
    ScratchPool::Lease l = pool->acquire(1 << 20);
    ScratchPool::Lease s = pool->acquire(1 << 12);
    small = s.data();
    large = l.data();
  }
  EXPECT_EQ(pool->acquire(512).data(), small);
  EXPECT_EQ(pool->acquire(8192).data(), large);
}

TEST(ScratchPool, FreesWhatExceedsTheRetainedLimit) {
  auto pool = ScratchPool::create(/*retained_limit_bytes=*/1 << 20);
  {
    ScratchPool::Lease a = pool->acquire(768 << 10);  // 1 MiB buffers: one fits the limit
    ScratchPool::Lease b = pool->acquire(768 << 10);
  }
  EXPECT_EQ(pool->free_buffers(), 1u);
  EXPECT_EQ(pool->retained_bytes(), std::size_t{1} << 20);
}

TEST(ScratchPool, LeaseKeepsThePoolAliveAndMovesOwnership) {
  ScratchPool::Lease kept;
  {
    auto pool = ScratchPool::create();
    ScratchPool::Lease lease = pool->acquire(64);
    kept = std::move(lease);
    EXPECT_EQ(lease.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  }
  ASSERT_NE(kept.data(), nullptr);
  std::memset(kept.data(), 0, kept.size());  // the pool is gone from scope, the buffer is not
}

TEST(ScratchPool, ThreadsShareOnePool) {
  auto pool = ScratchPool::create();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 2000; ++i) {
        ScratchPool::Lease lease = pool->acquire(static_cast<std::size_t>(64 + t * 64 + i % 7));
        std::memset(lease.data(), t, lease.size());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_LE(pool->free_buffers(), 4u);  // never more buffers than leases held at once
}

}  // namespace
}  // namespace dtrain::comm
