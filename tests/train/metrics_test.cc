// metrics.jsonl records, summary.json, time to accuracy and the epoch line.
#include "dtrain/train/metrics.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "dtrain/base/error.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/progress.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> records;
  std::string line;
  while (std::getline(in, line)) records.push_back(nlohmann::json::parse(line));
  return records;
}

TEST(Metrics, RecordsCarryEveryField) {
  const auto step = to_json(StepRecord{2, 500, 0.25, 0.1, 60000.0, 3.5});
  EXPECT_EQ(step["kind"], "step");
  EXPECT_EQ(step["epoch"], 2);
  EXPECT_EQ(step["step"], 500);
  EXPECT_DOUBLE_EQ(step["loss"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(step["lr"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(step["samples_per_second"].get<double>(), 60000.0);
  EXPECT_DOUBLE_EQ(step["elapsed"].get<double>(), 3.5);

  const auto epoch = to_json(EpochRecord{3, 1407, 0.31, 0.884, 0.35, 0.871, 61234, 4.9, 14.2, 16});
  for (const char* key : {"kind", "epoch", "train_loss", "train_accuracy", "test_loss",
                          "test_accuracy", "samples_per_second", "epoch_seconds", "elapsed"}) {
    EXPECT_TRUE(epoch.contains(key)) << key;
  }
  EXPECT_EQ(epoch["kind"], "epoch");
  EXPECT_DOUBLE_EQ(epoch["test_accuracy"].get<double>(), 0.871);
  EXPECT_EQ(to_json(EvalRecord{1, 100, 0.5, 0.8, 1.5, 2.0})["kind"], "eval");
}

TEST(Metrics, LogWritesOneObjectPerLineAndAppends) {
  const auto path =
      (fs::temp_directory_path() / fmt::format("dtrain_metrics_{}.jsonl", ::getpid())).string();
  {
    MetricsLog log(path, /*append=*/false);
    log.write(to_json(StepRecord{1, 10, 1.5, 0.1, 100, 1}));
    log.write(to_json(StepRecord{1, 20, 1.0, 0.1, 100, 2}));
  }
  {
    MetricsLog log(path, /*append=*/true);
    log.write(to_json(EpochRecord{1, 20, 1.2, 0.5, 1.1, 0.55, 100, 0.2, 0.2, 2.5}));
  }
  const auto records = read_lines(path);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0]["step"], 10);
  EXPECT_EQ(records[1]["loss"], 1.0);
  EXPECT_EQ(records[2]["kind"], "epoch");
  {
    MetricsLog log(path, /*append=*/false);  // a new run starts the file over
  }
  EXPECT_TRUE(read_lines(path).empty());
  fs::remove(path);
  EXPECT_THROW(MetricsLog("/nonexistent/dtrain/metrics.jsonl", false), Error);
}

TEST(Metrics, TimeToAccuracyIsTheFirstEvaluationAtOrAboveTheTarget) {
  AccuracyTargets targets({0.85, 0.88});
  targets.observe(0.80, 1.0);
  targets.observe(0.85, 2.0);  // exactly the target counts
  targets.observe(0.84, 3.0);  // falling back does not undo it
  targets.observe(0.86, 4.0);
  const auto doc = targets.to_json();
  EXPECT_DOUBLE_EQ(doc["0.85"].get<double>(), 2.0);
  EXPECT_TRUE(doc["0.88"].is_null());
  targets.observe(0.90, 5.0);
  EXPECT_DOUBLE_EQ(targets.to_json()["0.88"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(targets.to_json()["0.85"].get<double>(), 2.0);
  EXPECT_EQ(AccuracyTargets::key(0.875), "0.875");
}

TEST(Metrics, SummaryJsonHasTheRequiredFields) {
  RunSummary summary;
  summary.model = "mlp";
  summary.parameters = 269322;
  summary.epochs = 2;
  summary.steps = 938;
  summary.final_test_accuracy = 0.861;
  summary.best_test_accuracy = 0.862;
  summary.wall_seconds = 9.5;
  summary.train_samples_per_second = 60000;
  AccuracyTargets targets({0.85, 0.88});
  targets.observe(0.86, 3.25);
  summary.time_to_accuracy = targets.to_json();
  const auto path =
      (fs::temp_directory_path() / fmt::format("dtrain_summary_{}.json", ::getpid())).string();
  write_summary(path, summary);
  const auto doc = nlohmann::json::parse(read_whole_file(path));
  EXPECT_DOUBLE_EQ(doc["final_test_accuracy"].get<double>(), 0.861);
  EXPECT_DOUBLE_EQ(doc["best_test_accuracy"].get<double>(), 0.862);
  EXPECT_DOUBLE_EQ(doc["wall_seconds"].get<double>(), 9.5);
  EXPECT_DOUBLE_EQ(doc["train_samples_per_second"].get<double>(), 60000);
  EXPECT_DOUBLE_EQ(doc["time_to_accuracy"]["0.85"].get<double>(), 3.25);
  EXPECT_TRUE(doc["time_to_accuracy"]["0.88"].is_null());
  EXPECT_EQ(doc["epochs"], 2);
  EXPECT_EQ(doc["steps"], 938);
  EXPECT_EQ(doc["model"], "mlp");
  EXPECT_EQ(doc["parameters"], 269322);
  fs::remove(path);
}

TEST(Progress, EpochLineFormat) {
  const EpochRecord record{3, 1407, 0.31214, 0.8843, 0.35, 0.8712, 61234.4, 4.94, 14.0, 16.0};
  EXPECT_EQ(format_epoch_line(record, 5),
            "epoch 3/5  loss 0.3121  train 88.4%  test 87.1%  61234 samples/s  4.9 s");
}

// Runs `fn` against a Progress writing into a temporary file and returns what it wrote.
template <typename Fn>
std::string captured(Progress::Style style, Fn&& fn) {
  std::FILE* file = std::tmpfile();
  {
    Progress progress(file, style, 5);
    fn(progress);
  }
  std::fflush(file);
  std::rewind(file);
  std::string text;
  char buffer[256];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  std::fclose(file);
  return text;
}

TEST(Progress, StylesPrintWhatTheyPromise) {
  const EpochRecord epoch{1, 10, 0.5, 0.8, 0.6, 0.75, 1000, 1.0, 1.0, 1.2};
  auto run = [&](Progress& p) {
    p.begin_epoch(1, 10);
    for (int s = 1; s <= 10; ++s) p.step(s, 0.5, 1000);
    p.log_step(StepRecord{1, 10, 0.5, 0.1, 1000, 1});
    p.end_epoch(epoch);
  };
  const std::string lines = captured(Progress::Style::kLines, run);
  EXPECT_EQ(lines, "epoch 1/5  step 10  loss 0.5000  lr 0.1  1000 samples/s\n" +
                       format_epoch_line(epoch, 5) + "\n");
  const std::string bar = captured(Progress::Style::kBar, run);
  EXPECT_THAT(bar, HasSubstr("[####################] 10/10"));
  EXPECT_THAT(bar, HasSubstr("\r\033[K" + format_epoch_line(epoch, 5) + "\n"));
  EXPECT_EQ(captured(Progress::Style::kQuiet, run), "");
  // A file is not a terminal.
  std::FILE* file = std::tmpfile();
  EXPECT_EQ(Progress::detect_style(file, false), Progress::Style::kLines);
  EXPECT_EQ(Progress::detect_style(file, true), Progress::Style::kQuiet);
  std::fclose(file);
}

}  // namespace
}  // namespace dtrain::train
