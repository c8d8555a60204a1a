// Writes that fail: an atomic file never leaves a temp file or a half-written target behind, and
// the diagnostic files (trace.json, metrics.jsonl) never cost the run: one warning and go on.
#include "dtrain/train/atomic_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <sstream>

#include "dtrain/base/error.h"
#include "dtrain/train/metrics.h"
#include "dtrain/train/trace.h"
#include "file_size_limit.h"
#include "temp_dir.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using dtrain::testing::FileSizeLimit;
using dtrain::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::int64_t count_lines(const std::string& text) {
  return static_cast<std::int64_t>(std::count(text.begin(), text.end(), '\n'));
}

TEST(AtomicFile, AWriteThatDoesNotFitRemovesItsTempFileAndKeepsTheOldFile) {
  TempDir dir;
  const std::string path = dir.file("summary.json");
  write_file_atomically(path, "old\n");
  const std::string big(100000, 'x');
  std::string message;
  {
    FileSizeLimit limit(4096);
    try {
      write_file_atomically(path, big);
    } catch (const Error& e) {
      message = e.what();
    }
  }
  EXPECT_THAT(message, AllOf(HasSubstr("cannot write " + path), HasSubstr("File too large"),
                             HasSubstr("unchanged")));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(read_whole_file(path), "old\n");
}

// The supervisors ask "did this attempt write summary.json?" by identity, not by clock: the same
// bytes rewritten within the same clock tick (a coarse file-server timestamp) still count.
TEST(AtomicFile, AFileWrittenAgainHasAnotherIdentity) {
  TempDir dir;
  const std::string path = dir.file("summary.json");
  const std::optional<FileIdentity> none = file_identity(path);
  EXPECT_FALSE(none.has_value());
  EXPECT_FALSE(written_since(path, none));
  write_file_atomically(path, "{}\n");
  EXPECT_TRUE(written_since(path, none));
  const std::optional<FileIdentity> first = file_identity(path);
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(written_since(path, first));
  write_file_atomically(path, "{}\n");  // the same bytes
  EXPECT_TRUE(written_since(path, first));
  EXPECT_NE(file_identity(path)->inode, first->inode);
}

TEST(DiagnosticFiles, AnUnwritableTraceIsOneWarning) {
  TempDir dir;
  TraceRecorder recorder;
  recorder.start(TraceRecorder::Clock::now());
  recorder.add("step", "compute", TraceRecorder::kComputeThread, TraceRecorder::Clock::now(),
               TraceRecorder::Clock::now());
  const std::string path = dir.file("missing-folder/trace.json");
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(write_trace(nullptr, recorder, path));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(log), 1) << log;
  EXPECT_THAT(log, AllOf(HasSubstr(path), HasSubstr("No such file or directory"),
                         HasSubstr("the run goes on")));
  // And a writable one is written.
  write_trace(nullptr, recorder, dir.file("trace.json"));
  EXPECT_THAT(read_whole_file(dir.file("trace.json")), HasSubstr("\"traceEvents\""));
}

TEST(DiagnosticFiles, MetricsOnAFullDiskWarnOnceAndGoOn) {
  MetricsLog log("/dev/full", /*append=*/false);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) EXPECT_NO_THROW(log.write(to_json(StepRecord{1, i, 1.0, 0.1, 1, 1})));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(err), 1) << err;
  EXPECT_THAT(err, AllOf(HasSubstr("/dev/full"), HasSubstr("No space left on device"),
                         HasSubstr("the run goes on")));
  EXPECT_EQ(log.lost(), 5);
}

TEST(DiagnosticFiles, MetricsKeepWholeLinesWhenALineDoesNotFit) {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  MetricsLog log(path, /*append=*/false);
  std::int64_t written = 0;
  ::testing::internal::CaptureStderr();
  {
    FileSizeLimit limit(1000);
    for (int i = 0; i < 50; ++i) log.write(to_json(StepRecord{1, 1000 + i, 1.25, 0.1, 123.5, 2}));
    written = 50 - log.lost();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(err), 1) << err;
  EXPECT_GT(written, 0);
  EXPECT_GT(log.lost(), 0);
  // Only whole lines remain, one per record written, each valid JSON.
  const std::string text = read_whole_file(path);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(count_lines(text), written);
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << line;
  }
  // With room again, records are written again (the lost ones stay lost).
  log.write(to_json(StepRecord{2, 9999, 1.0, 0.1, 1, 1}));
  EXPECT_EQ(count_lines(read_whole_file(path)), written + 1);
}

}  // namespace
}  // namespace dtrain::train
