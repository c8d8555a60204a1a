// The memory tier (memory_checkpoint.h): two slots used in turn, a save cut short by a kill
// never costs the other slot, a damaged slot is passed over, a file of another run is not read,
// and a resume takes whichever tier holds the newer checkpoint.
#include "dtrain/train/memory_checkpoint.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>

#include "dtrain/base/error.h"
#include "file_size_limit.h"
#include "temp_dir.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using dtrain::testing::FileSizeLimit;
using dtrain::testing::TempDir;
using ::testing::EndsWith;
using ::testing::HasSubstr;

// Offsets in the header (memory_checkpoint.h's layout).
constexpr off_t kSlotCapacityAt = 16;
constexpr off_t kSequenceAt = 24;  // u64 sequence[2]
constexpr off_t kHeaderBytes = 4096;

// A checkpoint inside epoch `epochs` at global step `step` with `n` parameters.
Checkpoint make_checkpoint(std::int64_t epochs, std::int64_t step, std::size_t n = 64) {
  Checkpoint c;
  c.epoch = epochs;
  c.sampler_epoch = epochs;
  c.sampler_position = 32;
  c.global_step = step;
  c.optimizer_steps = step;
  c.seed = 3;
  c.scalars = {{"train_seconds", 0.5 * static_cast<double>(step)}};
  c.params.assign(n, 0.125f * static_cast<float>(step));
  c.optimizer_state.push_back({"adam.m", std::vector<float>(n, -1.0f * static_cast<float>(step))});
  return c;
}

std::uint64_t read_u64(const std::string& path, off_t at) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  std::uint64_t value = 0;
  EXPECT_EQ(::pread(fd, &value, sizeof(value), at), static_cast<ssize_t>(sizeof(value)));
  ::close(fd);
  return value;
}

void write_bytes(const std::string& path, off_t at, const void* data, std::size_t n) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_EQ(::pwrite(fd, data, n, at), static_cast<ssize_t>(n));
  ::close(fd);
}

// What a kill in the middle of a save into `slot` leaves: its sequence 0.
void cut_save_short(const std::string& path, int slot) {
  const std::uint64_t zero = 0;
  write_bytes(path, kSequenceAt + 8 * slot, &zero, sizeof(zero));
}

class MemoryCheckpointTest : public ::testing::Test {
 protected:
  TempDir tmp;
  std::string run_dir = tmp.file("run");
  std::string folder = tmp.file("shm");
  void SetUp() override {
    fs::create_directories(run_dir);
    fs::create_directories(folder);
  }
};

TEST_F(MemoryCheckpointTest, ASaveReadsBackWhole) {
  MemoryCheckpoint memory(run_dir, folder);
  EXPECT_FALSE(memory.holds_any());
  EXPECT_FALSE(memory.newest().has_value());
  const Checkpoint c = make_checkpoint(0, 5);
  memory.save(c);
  EXPECT_TRUE(memory.holds_any());
  const auto newest = memory.newest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->checkpoint.params, c.params);
  EXPECT_EQ(newest->checkpoint.optimizer_state, c.optimizer_state);
  EXPECT_EQ(newest->checkpoint.global_step, 5);
  EXPECT_THAT(newest->path, EndsWith("#slot0"));
  EXPECT_EQ(fs::path(memory.path()).parent_path(), fs::path(folder));
}

TEST_F(MemoryCheckpointTest, SlotsAreUsedInTurnAndTheNewestWins) {
  MemoryCheckpoint memory(run_dir, folder);
  for (std::int64_t step = 1; step <= 3; ++step) memory.save(make_checkpoint(0, step));
  const auto newest = memory.newest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->checkpoint.global_step, 3);
  EXPECT_THAT(newest->path, EndsWith("#slot0"));  // 1 -> slot 0, 2 -> slot 1, 3 -> slot 0
}

TEST_F(MemoryCheckpointTest, ASaveCutShortLeavesTheOtherSlot) {
  MemoryCheckpoint memory(run_dir, folder);
  memory.save(make_checkpoint(0, 1));  // slot 0
  memory.save(make_checkpoint(0, 2));  // slot 1
  cut_save_short(memory.path(), 1);
  const auto newest = memory.newest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->checkpoint.global_step, 1);
}

TEST_F(MemoryCheckpointTest, ADamagedSlotIsPassedOver) {
  MemoryCheckpoint memory(run_dir, folder);
  memory.save(make_checkpoint(0, 1));  // slot 0
  memory.save(make_checkpoint(0, 2));  // slot 1
  const std::uint64_t capacity = read_u64(memory.path(), kSlotCapacityAt);
  const char junk[4] = {'x', 'x', 'x', 'x'};
  write_bytes(memory.path(), kHeaderBytes + static_cast<off_t>(capacity) + 200, junk, sizeof(junk));
  const auto newest = memory.newest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->checkpoint.global_step, 1);
}

TEST_F(MemoryCheckpointTest, ARestartedRunWritesOverTheOlderSlotOnly) {
  {
    MemoryCheckpoint memory(run_dir, folder);
    memory.save(make_checkpoint(0, 1));  // slot 0
    memory.save(make_checkpoint(0, 2));  // slot 1
  }
  MemoryCheckpoint restarted(run_dir, folder);
  ASSERT_EQ(restarted.newest()->checkpoint.global_step, 2);
  restarted.save(make_checkpoint(0, 3));  // over step 1, in slot 0
  EXPECT_EQ(restarted.newest()->checkpoint.global_step, 3);
  cut_save_short(restarted.path(), 0);
  EXPECT_EQ(restarted.newest()->checkpoint.global_step, 2);
}

TEST_F(MemoryCheckpointTest, ALargerCheckpointRemakesTheSlots) {
  MemoryCheckpoint memory(run_dir, folder);
  memory.save(make_checkpoint(0, 1, 64));
  memory.save(make_checkpoint(0, 2, 200000));  // 1.6 MB, beyond the first slots' slack
  const auto newest = memory.newest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->checkpoint.params.size(), 200000u);
}

TEST_F(MemoryCheckpointTest, AFileOfAnotherRunIsNotRead) {
  MemoryCheckpoint memory(run_dir, folder);
  memory.save(make_checkpoint(0, 1));
  const std::string other_run = tmp.file("other");
  fs::create_directories(other_run);
  MemoryCheckpoint other(other_run, folder);
  EXPECT_NE(other.path(), memory.path());
  fs::copy_file(memory.path(), other.path());  // a name clash, in effect
  EXPECT_FALSE(other.holds_any());
  EXPECT_FALSE(other.newest().has_value());
}

TEST_F(MemoryCheckpointTest, NoRoomIsAnErrorNamingTheBytesAndTheTierTurnsOff) {
  MemoryCheckpoint memory(run_dir, folder);
  {
    const FileSizeLimit limit(1 << 20);
    try {
      memory.save(make_checkpoint(0, 1, 1 << 20));  // two slots of 8 MB
      FAIL() << "expected a CheckpointError";
    } catch (const CheckpointError& e) {
      EXPECT_THAT(e.what(), HasSubstr("no room for memory checkpoints"));
      EXPECT_THAT(e.what(), HasSubstr("MB"));
      EXPECT_THAT(e.what(), HasSubstr("memory_checkpoint_folder"));
    }
  }
  EXPECT_TRUE(memory.off());
  memory.save(make_checkpoint(0, 2));  // returns at once
  EXPECT_FALSE(memory.holds_any());
}

TEST_F(MemoryCheckpointTest, RemoveDeletesTheFile) {
  MemoryCheckpoint memory(run_dir, folder);
  memory.save(make_checkpoint(0, 1));
  ASSERT_TRUE(fs::exists(memory.path()));
  memory.remove();
  EXPECT_FALSE(fs::exists(memory.path()));
  EXPECT_FALSE(memory.holds_any());
}

class NewestOfTiersTest : public MemoryCheckpointTest {
 protected:
  CheckpointDir disk{tmp.file("run/checkpoints"), 0};
  MemoryCheckpoint memory{run_dir, folder};
};

TEST_F(NewestOfTiersTest, TheNewerTierWins) {
  disk.save(make_checkpoint(1, 10));
  memory.save(make_checkpoint(1, 12));
  EXPECT_EQ(newest_checkpoint(disk, &memory).checkpoint.global_step, 12);
  EXPECT_EQ(newest_checkpoint(disk, nullptr).checkpoint.global_step, 10);
  disk.save(make_checkpoint(1, 14));
  EXPECT_EQ(newest_checkpoint(disk, &memory).checkpoint.global_step, 14);
  // An epoch boundary comes after every step of the epoch before it.
  Checkpoint epoch_end = make_checkpoint(2, 20);
  epoch_end.sampler_position = 0;
  memory.save(epoch_end);
  EXPECT_EQ(newest_checkpoint(disk, &memory).checkpoint.global_step, 20);
}

TEST_F(NewestOfTiersTest, EitherTierAloneIsEnough) {
  EXPECT_FALSE(has_any_checkpoint(disk, &memory));
  EXPECT_THROW(newest_checkpoint(disk, &memory), CheckpointError);
  memory.save(make_checkpoint(0, 3));
  EXPECT_TRUE(has_any_checkpoint(disk, &memory));
  EXPECT_FALSE(has_any_checkpoint(disk, nullptr));
  EXPECT_EQ(newest_checkpoint(disk, &memory).checkpoint.global_step, 3);
}

TEST_F(NewestOfTiersTest, ADamagedDiskFallsBackToMemory) {
  const std::string path = disk.save(make_checkpoint(0, 4));
  memory.save(make_checkpoint(0, 2));
  fs::resize_file(path, 100);
  const VerifiedCheckpoint newest = newest_checkpoint(disk, &memory);
  EXPECT_EQ(newest.checkpoint.global_step, 2);
  EXPECT_THAT(newest.path, HasSubstr("#slot"));
}

}  // namespace
}  // namespace dtrain::train
