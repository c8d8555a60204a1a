#include "dtrain/train/progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace dtrain::train {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string read_all(std::FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string text;
  char chunk[256];
  while (const std::size_t n = std::fread(chunk, 1, sizeof(chunk), file)) text.append(chunk, n);
  return text;
}

TEST(Progress, HeartbeatUntilTheFirstStepLine) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    Progress progress(out, Progress::Style::kLines, 3);
    progress.set_heartbeat_seconds(0.02);
    progress.begin_epoch(1, 469);
    progress.step(2, 0.5, 100.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    progress.log_step(StepRecord{1, 50, 0.5, 0.1, 100.0, 1.0});
  }
  const std::string text = read_all(out);
  EXPECT_THAT(text, HasSubstr("epoch 1/3: 2 of 469 steps done"));
  // After the step line the heartbeat is quiet: the step line is the last line.
  EXPECT_THAT(text.substr(text.rfind("epoch 1/3  step 50")), Not(HasSubstr("steps done")));
  std::fclose(out);
}

TEST(Progress, NoHeartbeatOnATerminalOrWhenQuiet) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    Progress progress(out, Progress::Style::kQuiet, 3);
    progress.set_heartbeat_seconds(0.01);
    progress.begin_epoch(1, 10);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(read_all(out), "");
  std::fclose(out);
}

TEST(Progress, AnnouncesOnlyLargeModels) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  MemoryNeed need;
  need.parameters = 1000;
  announce_model_build(out, need);
  announce_model_build(out, std::nullopt);
  EXPECT_EQ(read_all(out), "");
  need.parameters = 924'000'000;
  announce_model_build(out, need);
  EXPECT_THAT(read_all(out), HasSubstr("building the model: 924000000 parameters, 6.88 GiB"));
  std::fclose(out);
}

}  // namespace
}  // namespace dtrain::train
