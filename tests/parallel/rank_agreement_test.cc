// Ranks agree before training: a differing config names the line on the differing rank and the
// ranks everywhere else; rank 0's parameters reach every rank.
#include "dtrain/parallel/rank_agreement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtrain/base/error.h"
#include "dtrain/comm/spawn_ranks.h"

namespace dtrain::parallel {
namespace {

using ::testing::HasSubstr;

TEST(RankAgreement, EqualTextsPass) {
  comm::spawn_ranks(3, [](comm::Communicator& comm) {
    check_same_on_all_ranks(comm, "a = 1\nb = 2\n", "the configuration");
  });
}

TEST(RankAgreement, DifferingRankNamesTheLineOthersNameTheRank) {
  std::vector<std::string> messages(3);
  comm::spawn_ranks(3, [&](comm::Communicator& comm) {
    const std::string text = comm.rank() == 2 ? "a = 1\nb = 3\n" : "a = 1\nb = 2\n";
    try {
      check_same_on_all_ranks(comm, text, "the configuration");
    } catch (const ConfigError& e) {
      messages[static_cast<std::size_t>(comm.rank())] = e.what();
    }
  });
  EXPECT_THAT(messages[2], HasSubstr("line 2"));
  EXPECT_THAT(messages[2], HasSubstr("'b = 3'"));
  EXPECT_THAT(messages[2], HasSubstr("'b = 2'"));
  EXPECT_THAT(messages[0], HasSubstr("rank(s) 2"));
  EXPECT_THAT(messages[1], HasSubstr("rank(s) 2"));
}

TEST(RankAgreement, ExtraLineCountsAsADifference) {
  std::vector<std::string> messages(2);
  comm::spawn_ranks(2, [&](comm::Communicator& comm) {
    const std::string text = comm.rank() == 1 ? "a = 1\nextra\n" : "a = 1\n";
    try {
      check_same_on_all_ranks(comm, text, "the layout");
    } catch (const ConfigError& e) {
      messages[static_cast<std::size_t>(comm.rank())] = e.what();
    }
  });
  EXPECT_THAT(messages[1], HasSubstr("'<end>'"));
  EXPECT_THAT(messages[0], HasSubstr("the layout of rank(s) 1"));
}

TEST(RankAgreement, BroadcastParametersCopiesRankZero) {
  comm::spawn_ranks(3, [](comm::Communicator& comm) {
    nn::ParamStore store;
    store.add_param("w", {5}, true);
    store.add_buffer("running", {2});
    store.finalize();
    for (int i = 0; i < 5; ++i) store.params()[i] = static_cast<float>(comm.rank() * 10 + i);
    for (int i = 0; i < 2; ++i) store.buffers()[i] = static_cast<float>(comm.rank() + 100);
    broadcast_parameters(comm, store);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(store.params()[i], static_cast<float>(i));
    for (int i = 0; i < 2; ++i) EXPECT_EQ(store.buffers()[i], 100.0f);
  });
}

}  // namespace
}  // namespace dtrain::parallel
