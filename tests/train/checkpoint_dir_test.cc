// The checkpoints folder: names from content, their order, pruning, and a resume that always finds
// the newest checkpoint that verifies, whatever happened to `latest` or to the newest file.
#include "dtrain/train/checkpoint_dir.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "dtrain/base/error.h"
#include "dtrain/train/atomic_file.h"
#include "file_size_limit.h"
#include "temp_dir.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using dtrain::testing::FileSizeLimit;
using dtrain::testing::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// A small checkpoint at `epochs` complete epochs and, when `step` > 0, inside the next epoch.
Checkpoint make_checkpoint(std::int64_t epochs, std::int64_t step = 0) {
  Checkpoint c;
  c.epoch = epochs;
  c.sampler_epoch = epochs;
  c.sampler_position = step > 0 ? 64 : 0;
  c.global_step = step > 0 ? step : 100 * epochs;
  c.optimizer_steps = c.global_step;
  c.seed = 7;
  c.scalars = {{"train_seconds", 1.5}};
  c.params.assign(40, 0.25f * static_cast<float>(epochs));
  c.optimizer_state.push_back({"sgd.momentum", std::vector<float>(40, 0.5f)});
  return c;
}

// The file names of `paths`.
std::vector<std::string> names(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& path : paths) out.push_back(fs::path(path).filename().string());
  return out;
}

// Names of the *.tmp files left in `folder`.
std::vector<std::string> temp_files(const fs::path& folder) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.path().extension() == ".tmp") out.push_back(entry.path().filename().string());
  }
  return out;
}

template <typename Fn>
std::string checkpoint_error(Fn&& fn) {
  try {
    fn();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a CheckpointError";
  return "";
}

// newest_good() with what it printed on stderr.
std::pair<VerifiedCheckpoint, std::string> newest_good_logged(const CheckpointDir& checkpoints) {
  ::testing::internal::CaptureStderr();
  VerifiedCheckpoint found;
  try {
    found = checkpoints.newest_good();
  } catch (...) {
    ::testing::internal::GetCapturedStderr();
    throw;
  }
  return {std::move(found), ::testing::internal::GetCapturedStderr()};
}

std::int64_t count_lines(const std::string& text) {
  return static_cast<std::int64_t>(std::count(text.begin(), text.end(), '\n'));
}

void flip_byte(const std::string& path, std::size_t at) {
  std::string bytes = read_whole_file(path);
  bytes.at(at) = static_cast<char>(bytes.at(at) ^ 0x20);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void truncate_file(const std::string& path, std::size_t size) { fs::resize_file(path, size); }

TEST(CheckpointDir, NamesComeFromTheContent) {
  EXPECT_EQ(CheckpointDir::file_name(make_checkpoint(2)), "epoch-2.ckpt");
  EXPECT_EQ(CheckpointDir::file_name(make_checkpoint(2, 150)), "epoch-2-step-150.ckpt");
  EXPECT_EQ(CheckpointDir::file_name(make_checkpoint(0, 7)), "epoch-0-step-7.ckpt");
  Checkpoint c = make_checkpoint(3);
  c.epoch = 99;  // the name follows the sampler, not the epoch counter
  EXPECT_EQ(CheckpointDir::file_name(c), "epoch-3.ckpt");
}

TEST(CheckpointDir, SavesPointsLatestAndKeepsTheNewest) {
  TempDir dir;
  CheckpointDir checkpoints((dir.path() / "checkpoints").string(), /*keep=*/2);
  for (std::int64_t epoch = 1; epoch <= 4; ++epoch) {
    const std::string path = checkpoints.save(make_checkpoint(epoch));
    EXPECT_EQ(checkpoints.latest_path(), path);
    const auto [found, log] = newest_good_logged(checkpoints);
    EXPECT_EQ(found.path, path);
    EXPECT_EQ(found.checkpoint.epoch, epoch);
    EXPECT_EQ(log, "");
  }
  EXPECT_THAT(names(checkpoints.list()), ElementsAre("epoch-3.ckpt", "epoch-4.ckpt"));
  EXPECT_EQ(read_whole_file((dir.path() / "checkpoints" / "latest").string()), "epoch-4.ckpt\n");
}

TEST(CheckpointDir, KeepZeroKeepsAll) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/0);
  for (std::int64_t epoch = 1; epoch <= 12; ++epoch) checkpoints.save(make_checkpoint(epoch));
  const auto files = checkpoints.list();
  ASSERT_EQ(files.size(), 12u);
  EXPECT_THAT(files.back(), HasSubstr("epoch-12.ckpt"));  // numeric, not lexical, order
  EXPECT_THAT(files[1], HasSubstr("epoch-2.ckpt"));
}

TEST(CheckpointDir, OrdersEpochThenStepAndIgnoresOtherNames) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/0);
  checkpoints.save(make_checkpoint(10, 5));
  checkpoints.save(make_checkpoint(3));
  checkpoints.save(make_checkpoint(2, 1000));
  checkpoints.save(make_checkpoint(2));
  checkpoints.save(make_checkpoint(10));
  checkpoints.save(make_checkpoint(2, 150));
  for (const char* other : {"epoch-03.ckpt", "epoch-2-step-.ckpt", "epoch--1.ckpt",
                            "epoch-2-step-+5.ckpt", "epoch-4.ckpt.tmp", "notes.txt"}) {
    std::ofstream(dir.file(other)) << "x";
  }
  EXPECT_THAT(names(checkpoints.list()),
              ElementsAre("epoch-2.ckpt", "epoch-2-step-150.ckpt", "epoch-2-step-1000.ckpt",
                          "epoch-3.ckpt", "epoch-10.ckpt", "epoch-10-step-5.ckpt"));
  // `latest` names the last saved, but a resume takes the newest by order.
  EXPECT_EQ(read_whole_file(dir.file("latest")), "epoch-2-step-150.ckpt\n");
  EXPECT_THAT(checkpoints.newest_good().path, HasSubstr("epoch-10-step-5.ckpt"));
}

TEST(CheckpointDir, PrunesInThatOrder) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/3);
  checkpoints.save(make_checkpoint(1));
  checkpoints.save(make_checkpoint(1, 150));
  checkpoints.save(make_checkpoint(1, 300));
  checkpoints.save(make_checkpoint(2));
  checkpoints.save(make_checkpoint(2, 450));
  EXPECT_THAT(names(checkpoints.list()),
              ElementsAre("epoch-1-step-300.ckpt", "epoch-2.ckpt", "epoch-2-step-450.ckpt"));
  // The file just saved is never pruned, even when it is not the newest by order.
  CheckpointDir keep_one(dir.folder(), /*keep=*/1);
  keep_one.save(make_checkpoint(1, 200));
  EXPECT_THAT(names(keep_one.list()),
              ElementsAre("epoch-1-step-200.ckpt", "epoch-2-step-450.ckpt"));
}

TEST(CheckpointDir, FallsBackFromATruncatedNewestWithOneWarning) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/0);
  checkpoints.save(make_checkpoint(1));
  const std::string second = checkpoints.save(make_checkpoint(2));
  const std::string third = checkpoints.save(make_checkpoint(3));
  truncate_file(third, 50);
  const auto [found, log] = newest_good_logged(checkpoints);
  EXPECT_EQ(found.path, second);
  EXPECT_EQ(found.checkpoint.epoch, 2);
  EXPECT_EQ(count_lines(log), 1) << log;
  EXPECT_THAT(log, AllOf(HasSubstr(third), HasSubstr("truncated"),
                         HasSubstr("resuming from " + second + " instead")));
}

TEST(CheckpointDir, FallsBackOverSeveralDamagedFilesOneWarningEach) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/0);
  const std::string first = checkpoints.save(make_checkpoint(1));
  const std::string mid = checkpoints.save(make_checkpoint(1, 150));
  const std::string second = checkpoints.save(make_checkpoint(2));
  flip_byte(second, 100);  // inside the payload: only the CRC can tell
  truncate_file(mid, 0);
  const auto [found, log] = newest_good_logged(checkpoints);
  EXPECT_EQ(found.path, first);
  EXPECT_EQ(count_lines(log), 2) << log;
  EXPECT_THAT(log, AllOf(HasSubstr(second), HasSubstr("CRC-32"), HasSubstr(mid),
                         HasSubstr("resuming from " + first + " instead")));
}

TEST(CheckpointDir, LatestNamingAMissingFile) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/0);
  checkpoints.save(make_checkpoint(1));
  const std::string second = checkpoints.save(make_checkpoint(2));
  write_file_atomically(dir.file("latest"), "epoch-7.ckpt\n");
  const auto [found, log] = newest_good_logged(checkpoints);
  EXPECT_EQ(found.path, second);
  EXPECT_EQ(count_lines(log), 1) << log;
  EXPECT_THAT(log, AllOf(HasSubstr("epoch-7.ckpt, which does not exist"),
                         HasSubstr("resuming from " + second)));
}

TEST(CheckpointDir, LatestMissingOrGarbage) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/0);
  const std::string first = checkpoints.save(make_checkpoint(1));
  fs::remove(dir.file("latest"));
  auto [found, log] = newest_good_logged(checkpoints);
  EXPECT_EQ(found.path, first);
  EXPECT_THAT(log, AllOf(HasSubstr(dir.file("latest") + " is missing"),
                         HasSubstr("resuming from " + first)));
  write_file_atomically(dir.file("latest"), "../../etc/passwd\n");
  std::tie(found, log) = newest_good_logged(checkpoints);
  EXPECT_EQ(found.path, first);
  EXPECT_THAT(log, HasSubstr("'../../etc/passwd', not a checkpoint file name"));
}

TEST(CheckpointDir, LatestOlderThanTheNewestCompleteFile) {
  // A save whose `latest` update failed: the newer file is complete and must win.
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/0);
  checkpoints.save(make_checkpoint(1));
  const std::string newer = checkpoints.save(make_checkpoint(1, 150));
  write_file_atomically(dir.file("latest"), "epoch-1.ckpt\n");
  const auto [found, log] = newest_good_logged(checkpoints);
  EXPECT_EQ(found.path, newer);
  EXPECT_EQ(found.checkpoint.global_step, 150);
  EXPECT_EQ(count_lines(log), 1) << log;
  EXPECT_THAT(log, AllOf(HasSubstr("names epoch-1.ckpt"), HasSubstr("newer and complete")));
}

TEST(CheckpointDir, NoneVerifiesListsEveryDefect) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/0);
  const std::string first = checkpoints.save(make_checkpoint(1));
  const std::string second = checkpoints.save(make_checkpoint(2));
  truncate_file(first, 10);
  flip_byte(second, 60);
  ::testing::internal::CaptureStderr();
  const std::string message = checkpoint_error([&] { checkpoints.newest_good(); });
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_THAT(message, AllOf(HasSubstr("no checkpoint in " + dir.folder() + " verifies"),
                             HasSubstr(first), HasSubstr("truncated"), HasSubstr(second),
                             HasSubstr("CRC-32"), Not(HasSubstr("\n"))));
}

TEST(CheckpointDir, EmptyFolderAndHasAny) {
  TempDir dir;
  CheckpointDir checkpoints((dir.path() / "checkpoints").string(), /*keep=*/0);
  EXPECT_FALSE(checkpoints.has_any());  // the folder does not even exist
  EXPECT_THAT(checkpoint_error([&] { checkpoints.newest_good(); }),
              HasSubstr("no checkpoint to resume from"));
  EXPECT_THAT(checkpoint_error([&] { checkpoints.latest_path(); }),
              HasSubstr("no checkpoint to resume from"));
  fs::create_directories(dir.path() / "checkpoints");
  EXPECT_FALSE(checkpoints.has_any());
  write_file_atomically((dir.path() / "checkpoints" / "latest").string(), "epoch-1.ckpt\n");
  EXPECT_TRUE(checkpoints.has_any());
  EXPECT_THAT(checkpoint_error([&] { checkpoints.newest_good(); }),
              AllOf(HasSubstr("holds no checkpoint file"), HasSubstr("does not exist")));
  EXPECT_THAT(checkpoint_error([&] { checkpoints.latest_path(); }), HasSubstr("does not exist"));
  fs::remove((dir.path() / "checkpoints" / "latest"));
  std::ofstream((dir.path() / "checkpoints" / "epoch-1.ckpt").string()) << "junk";
  EXPECT_TRUE(checkpoints.has_any());
}

TEST(CheckpointDir, AFailedLatestWriteWarnsAndKeepsTheCheckpoint) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/0);
  checkpoints.save(make_checkpoint(1));
  // Block the temp file of `latest` with a folder: its write fails, the checkpoint's does not.
  fs::create_directories(dir.file("latest.tmp"));
  ::testing::internal::CaptureStderr();
  const std::string path = checkpoints.save(make_checkpoint(2));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(log), 1) << log;
  EXPECT_THAT(log, AllOf(HasSubstr(dir.file("latest")), HasSubstr("Is a directory"),
                         HasSubstr(path + " itself is complete")));
  EXPECT_EQ(read_whole_file(dir.file("latest")), "epoch-1.ckpt\n");
  const auto [found, resume_log] = newest_good_logged(checkpoints);
  EXPECT_EQ(found.path, path);
  EXPECT_EQ(found.checkpoint.epoch, 2);
  EXPECT_THAT(resume_log, HasSubstr("newer and complete"));
}

TEST(CheckpointDir, ACheckpointThatDoesNotFitLeavesNoTempFileAndTheOldFilesIntact) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/1);
  const std::string first = checkpoints.save(make_checkpoint(1));
  const std::string before = read_whole_file(first);
  Checkpoint big = make_checkpoint(2);
  big.params.assign(100000, 1.0f);  // 400 kB: larger than the limit below
  {
    FileSizeLimit limit(64 * 1024);
    const std::string message = checkpoint_error([&] { checkpoints.save(big); });
    EXPECT_THAT(message, AllOf(HasSubstr(dir.file("epoch-2.ckpt")), HasSubstr("File too large"),
                               HasSubstr("earlier checkpoints in " + dir.folder() + " are intact"),
                               Not(HasSubstr("\n"))));
  }
  EXPECT_THAT(temp_files(dir.path()), ::testing::IsEmpty());
  EXPECT_THAT(names(checkpoints.list()), ElementsAre("epoch-1.ckpt"));
  EXPECT_EQ(read_whole_file(first), before);
  EXPECT_EQ(read_whole_file(dir.file("latest")), "epoch-1.ckpt\n");
  const auto [found, log] = newest_good_logged(checkpoints);
  EXPECT_EQ(found.path, first);
  EXPECT_EQ(log, "");
}

// A disk of `capacity` bytes for the checkpoints of `folder`: a write that would take the files
// there past it fails as a full disk does (ENOSPC), leaving no file behind.
CheckpointDir::FileWriter disk_of(std::int64_t capacity, const std::string& folder) {
  return [capacity, folder](const std::string& path, std::string_view bytes) {
    std::int64_t used = 0;
    for (const auto& entry : fs::directory_iterator(folder)) {
      if (entry.path() != fs::path(path)) used += static_cast<std::int64_t>(entry.file_size());
    }
    if (used + static_cast<std::int64_t>(bytes.size()) > capacity) {
      throw FileWriteError(
          fmt::format("cannot write {}: writing {}.tmp failed: No space left on device", path,
                      path),
          ENOSPC);
    }
    write_file_atomically(path, bytes);
  };
}

// The kept checkpoints fill a small disk: a save that finds no space removes the older ones (never
// the newest that verifies), writes its file with one warning, and the run's checkpoints go on.
TEST(CheckpointDir, NoSpaceRemovesTheOlderCheckpointsAndWritesTheNewOne) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/2);
  const std::string first = checkpoints.save(make_checkpoint(1));
  const auto size = static_cast<std::int64_t>(fs::file_size(first));
  checkpoints.set_file_writer_for_test(disk_of(2 * size + 100, dir.folder()));  // room for 2
  checkpoints.save(make_checkpoint(1, 150));
  ::testing::internal::CaptureStderr();
  const std::string third = checkpoints.save(make_checkpoint(1, 200));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(log), 1) << log;
  EXPECT_THAT(log, HasSubstr("no space for epoch-1-step-200.ckpt in " + dir.folder() +
                             ": removed epoch-1.ckpt (older than epoch-1-step-150.ckpt, the "
                             "newest complete checkpoint, which is kept) and wrote it (said "
                             "once"));
  EXPECT_THAT(names(checkpoints.list()),
              ElementsAre("epoch-1-step-150.ckpt", "epoch-1-step-200.ckpt"));
  EXPECT_EQ(read_whole_file(dir.file("latest")), "epoch-1-step-200.ckpt\n");
  EXPECT_EQ(checkpoints.newest_good().path, third);
  EXPECT_THAT(temp_files(dir.path()), ::testing::IsEmpty());
  // The next save makes room alike, silently.
  ::testing::internal::CaptureStderr();
  const std::string fourth = checkpoints.save(make_checkpoint(1, 250));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_THAT(names(checkpoints.list()),
              ElementsAre("epoch-1-step-200.ckpt", "epoch-1-step-250.ckpt"));
  EXPECT_EQ(checkpoints.newest_good().path, fourth);
}

// A damaged newest file is not the one kept: the newest that verifies is, and files newer than it
// stay. With nothing older to remove, or keep = 0, the error stands and nothing is removed.
TEST(CheckpointDir, NoSpaceKeepsTheNewestThatVerifiesAndRemovesNothingElse) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/3);
  const std::string first = checkpoints.save(make_checkpoint(1));
  const std::string second = checkpoints.save(make_checkpoint(2));
  const std::string damaged = checkpoints.save(make_checkpoint(3));
  flip_byte(damaged, 40);
  const auto size = static_cast<std::int64_t>(fs::file_size(first));
  checkpoints.set_file_writer_for_test(disk_of(3 * size + 100, dir.folder()));
  ::testing::internal::CaptureStderr();
  checkpoints.save(make_checkpoint(4));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("removed epoch-1.ckpt (older than epoch-2.ckpt"));
  EXPECT_THAT(names(checkpoints.list()),
              ElementsAre("epoch-2.ckpt", "epoch-3.ckpt", "epoch-4.ckpt"));

  // Full again, and the newest that verifies is the only older file: the save fails, intact.
  TempDir other;
  CheckpointDir one(other.folder(), /*keep=*/2);
  const std::string only = one.save(make_checkpoint(1));
  one.set_file_writer_for_test(
      disk_of(static_cast<std::int64_t>(fs::file_size(only)) + 100, other.folder()));
  EXPECT_THAT(checkpoint_error([&] { one.save(make_checkpoint(2)); }),
              AllOf(HasSubstr("No space left on device"),
                    HasSubstr("epoch-1.ckpt, the newest, is the only one to keep"),
                    Not(HasSubstr("--resume")), Not(HasSubstr("\n"))));
  EXPECT_THAT(names(one.list()), ElementsAre("epoch-1.ckpt"));

  // keep = 0 keeps every checkpoint: none is removed to make room.
  TempDir all;
  CheckpointDir every(all.folder(), /*keep=*/0);
  const std::string a = every.save(make_checkpoint(1));
  every.save(make_checkpoint(2));
  every.set_file_writer_for_test(
      disk_of(2 * static_cast<std::int64_t>(fs::file_size(a)) + 100, all.folder()));
  EXPECT_THAT(checkpoint_error([&] { every.save(make_checkpoint(3)); }),
              HasSubstr("train.keep_checkpoints = 0 keeps every one, so none was removed"));
  EXPECT_THAT(names(every.list()), ElementsAre("epoch-1.ckpt", "epoch-2.ckpt"));
}

TEST(CheckpointDir, AFolderInTheWayOfTheRenameLeavesNoTempFile) {
  TempDir dir;
  CheckpointDir checkpoints(dir.folder(), /*keep=*/0);
  const std::string first = checkpoints.save(make_checkpoint(1));
  fs::create_directories(dir.file("epoch-2.ckpt/inside"));
  EXPECT_THAT(checkpoint_error([&] { checkpoints.save(make_checkpoint(2)); }),
              AllOf(HasSubstr("renaming"), HasSubstr(dir.file("epoch-2.ckpt"))));
  EXPECT_THAT(temp_files(dir.path()), ::testing::IsEmpty());
  // The folder has a checkpoint's name: it is passed over as damaged, with a warning.
  const auto [found, log] = newest_good_logged(checkpoints);
  EXPECT_EQ(found.path, first);
  EXPECT_THAT(log, HasSubstr(dir.file("epoch-2.ckpt")));
}

}  // namespace
}  // namespace dtrain::train
