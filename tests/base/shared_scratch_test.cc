// The shared scratch arena of a fork server (base/shared_scratch.h): what it serves and what it
// leaves to the heap, reuse by size, the fallback when full, and the point of it: a process forked
// after the arena was installed writes into the same pages the parent sees (no copy-on-write),
// while the parent's own allocation records are its own.
#include "dtrain/base/shared_scratch.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace dtrain {
namespace {

class SharedScratchTest : public ::testing::Test {
 protected:
  void TearDown() override { shared_scratch::uninstall_for_test(); }
};

TEST_F(SharedScratchTest, ServesNothingUntilInstalled) {
  EXPECT_FALSE(shared_scratch::installed());
  EXPECT_EQ(shared_scratch::allocate(1 << 20), nullptr);
}

TEST_F(SharedScratchTest, ServesBigBlocksReusesThemBySizeAndFallsBackWhenFull) {
  const std::size_t capacity = 4 << 20;
  ASSERT_TRUE(shared_scratch::install(capacity));
  EXPECT_FALSE(shared_scratch::install(capacity));  // one arena per process
  // Below kMinBytes: the heap's (nullptr here).
  EXPECT_EQ(shared_scratch::allocate(shared_scratch::kMinBytes - 1), nullptr);
  void* a = shared_scratch::allocate(1 << 20);
  void* b = shared_scratch::allocate((1 << 20) + 1);  // rounded up to 64 bytes
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(shared_scratch::owns(a));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 64, 0u);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 1 << 20);
  EXPECT_EQ(shared_scratch::used(), (std::size_t{2} << 20) + 64);
  // A released block serves the next request of its size; another size takes new space.
  shared_scratch::release(a, 1 << 20);
  EXPECT_EQ(shared_scratch::allocate(1 << 20), a);
  EXPECT_NE(shared_scratch::allocate(1 << 20), nullptr);  // a second one in use: new space
  // Full: 4 MiB - (3 MiB + 64) < 1 MiB left; the heap takes it (nullptr here).
  EXPECT_EQ(shared_scratch::allocate(1 << 20), nullptr);
  int local = 0;
  EXPECT_FALSE(shared_scratch::owns(&local));
  EXPECT_TRUE(shared_scratch::populate());
}

TEST_F(SharedScratchTest, AForkedChildWritesTheParentsPagesAndKeepsItsOwnRecords) {
  ASSERT_TRUE(shared_scratch::install(8 << 20));
  auto* block = static_cast<char*>(shared_scratch::allocate(1 << 20));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, 1 << 20);  // the template's warm-up populates the pages
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A worker: maps the pages, writes, allocates more (its own record), ends.
    const bool ok = shared_scratch::populate() && shared_scratch::owns(block);
    std::memset(block, 7, 1 << 20);
    void* more = shared_scratch::allocate(1 << 20);
    _exit(ok && more != nullptr ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The child's writes are in the parent's pages ...
  EXPECT_EQ(block[0], 7);
  EXPECT_EQ(block[(1 << 20) - 1], 7);
  // ... and its allocation is not in the parent's records: the next block is where the child's
  // was (a worker forked next reuses the space a killed one took).
  EXPECT_EQ(shared_scratch::used(), std::size_t{1} << 20);
  EXPECT_EQ(shared_scratch::allocate(1 << 20), block + (1 << 20));
}

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// The worker's populate is what spares its first step the page faults: after it, writing every
// page of the parent's blocks faults no page in (a child's mapping of shared memory starts empty:
// fork copies no page table entries of it).
TEST_F(SharedScratchTest, AfterPopulateAForkedChildWritesWithoutPageFaults) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer writes its shadow memory at every store: page faults of its own";
#endif
  constexpr std::size_t kBytes = 8 << 20;  // 2,048 pages
  ASSERT_TRUE(shared_scratch::install(16 << 20));
  auto* block = static_cast<char*>(shared_scratch::allocate(kBytes));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Exit codes: 1 populate refused (a kernel before 5.14: nothing to check), 2 faults at the
    // writes after it.
    if (!shared_scratch::populate()) _exit(1);
    const long before = minor_faults();
    for (std::size_t i = 0; i < kBytes; i += 4096) block[i] = 2;
    const long faults = minor_faults() - before;
    _exit(faults < 16 ? 0 : 2);  // a few for the stack and the loop's own pages
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 1) GTEST_SKIP() << "MADV_POPULATE_READ needs Linux 5.14";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's writes faulted pages in after populate()";
  EXPECT_EQ(block[4096], 2);
}

}  // namespace
}  // namespace dtrain
