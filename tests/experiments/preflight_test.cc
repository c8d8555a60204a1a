#include "dtrain/experiments/preflight.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dtrain::experiments {
namespace {

using ::testing::HasSubstr;

std::vector<LinkMeasurement> four_links() {
  return {{0, 1, 5.0, 10.0}, {1, 0, 5.0, 10.0}, {0, 2, 5.0, 9.0}, {2, 0, 6.0, 11.0}};
}

TEST(Preflight, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(median_of({}), 0.0);
  EXPECT_EQ(median_of({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median_of({4.0, 1.0, 2.0, 3.0}), 2.5);
}

TEST(Preflight, EvenLinksAreNotSlow) {
  EXPECT_TRUE(find_slow_links(four_links(), 0.5, 2.0).empty());
  auto links = four_links();
  links.push_back({1, 2, 12.0, 10.0});  // 2.4x the median, but only 7 us above it: noise
  EXPECT_TRUE(find_slow_links(links, 0.5, 2.0).empty());
}

TEST(Preflight, NamesALinkBelowHalfTheMedianBandwidth) {
  auto links = four_links();
  links.push_back({1, 2, 5.0, 4.0});  // median bandwidth 10: 4 < 5
  const auto problems = find_slow_links(links, 0.5, 2.0);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("slow link 1 -> 2: bandwidth 4 GB/s < 0.5 x the median 10"));
}

TEST(Preflight, NamesALinkAboveTwiceTheMedianLatency) {
  auto links = four_links();
  links.push_back({2, 1, 16.0, 10.0});  // median latency 5: 16 > 10 and > 5 + 10
  const auto problems = find_slow_links(links, 0.5, 2.0);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("slow link 2 -> 1: latency 16 us > 2 x the median 5 us"));
}

TEST(Preflight, VerdictCountsEveryProblem) {
  PreflightReport report;
  report.ranks = 3;
  report.links = four_links();
  report.links.push_back({1, 2, 20.0, 1.0});
  RankReport rank;
  report.rank_reports = {rank, rank, rank};
  for (int r = 0; r < 3; ++r) {
    report.rank_reports[static_cast<std::size_t>(r)].rank = r;
    report.rank_reports[static_cast<std::size_t>(r)].host = std::string("h");
  }
  const std::string missing("no such file /data/x");
  for (const std::size_t r : {std::size_t{1}, std::size_t{2}}) {
    report.rank_reports[r].data_ok = false;
    report.rank_reports[r].data = missing;
  }
  report.rank_reports[2].clock_offset_us = 250000.0;
  PreflightOptions options;
  judge_preflight(report, options);
  // One data problem for both ranks, a clock, a link with both figures off.
  ASSERT_EQ(report.problems.size(), 3u);
  EXPECT_EQ(report.problems[0], "ranks 1 (h), 2 (h): data: no such file /data/x");
  EXPECT_THAT(report.problems[1], HasSubstr("rank 2 (h): clock +250.0 ms"));
  EXPECT_THAT(report.problems[2], HasSubstr("slow link 1 -> 2: bandwidth"));
  EXPECT_THAT(report.problems[2], HasSubstr("latency"));
  EXPECT_THAT(verdict_line(report), HasSubstr("verdict: 3 problems: ranks 1 (h), 2 (h): data"));
  EXPECT_THAT(format_preflight(report), HasSubstr("FAILED (see the verdict)"));
}

TEST(Preflight, ReadyWithoutProblems) {
  PreflightReport report;
  EXPECT_EQ(verdict_line(report), "verdict: ready");
}

TEST(Preflight, ThreadRanksAreReachableAndMeasured) {
  PreflightOptions options;
  options.workers = 2;
  options.large_bytes = 4096;
  const PreflightReport report = run_preflight(options);
  ASSERT_EQ(report.rank_reports.size(), 2u);
  ASSERT_EQ(report.links.size(), 2u);
  for (const auto& link : report.links) {
    EXPECT_GT(link.latency_us, 0.0);
    EXPECT_GT(link.bandwidth_gbs, 0.0);
  }
}

}  // namespace
}  // namespace dtrain::experiments
