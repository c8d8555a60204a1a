// train::Config: defaults, TOML parsing, --set overrides, and the error for each kind of bad key.
#include "dtrain/train/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "dtrain/base/error.h"

namespace dtrain::train {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The message of the ConfigError that `fn` throws (fails the test when it throws none).
template <typename Fn>
std::string config_error(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

TEST(Config, EmptyFileGivesTheDefaults) {
  const Config config = parse_config("", "empty.toml");
  EXPECT_EQ(config, Config{});
  EXPECT_EQ(config.model.name, "mlp");
  EXPECT_EQ(config.model.hidden, (std::vector<std::int64_t>{256, 256}));
  EXPECT_EQ(config.data.path, "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(config.train.batch_size, 128);
  EXPECT_EQ(config.train.accuracy_targets, (std::vector<double>{0.85, 0.88}));
}

TEST(Config, ReadsEveryKindOfValue) {
  const Config config = parse_config(R"(
[model]
name = "lenet5"
hidden = [512, 128, 64]
dropout = 0.25
[data]
dataset = "synthetic"
synthetic_shape = [3, 4, 5]
[train]
epochs = 7
accuracy_targets = [0.5, 1]    # an integer is accepted where a number is expected
[optim]
lr = 1e-3
nesterov = true
weight_decay = 0     # integer 0 read as 0.0
)",
                                     "kinds.toml");
  EXPECT_EQ(config.model.name, "lenet5");
  EXPECT_EQ(config.model.hidden, (std::vector<std::int64_t>{512, 128, 64}));
  EXPECT_DOUBLE_EQ(config.model.dropout, 0.25);
  EXPECT_EQ(config.data.synthetic_shape, (std::vector<std::int64_t>{3, 4, 5}));
  EXPECT_EQ(config.train.epochs, 7);
  EXPECT_EQ(config.train.accuracy_targets, (std::vector<double>{0.5, 1.0}));
  EXPECT_DOUBLE_EQ(config.optim.lr, 1e-3);
  EXPECT_TRUE(config.optim.nesterov);
  EXPECT_EQ(config.optim.weight_decay, 0.0);
  // Untouched keys keep their defaults.
  EXPECT_EQ(config.train.batch_size, 128);
}

TEST(Config, OverridesParseByTheKeyType) {
  const Config config =
      parse_config("[train]\nepochs = 3\n", "base.toml",
                   {"train.epochs=9", "optim.lr=0.05", "optim.nesterov=true",
                    "model.hidden=[32,16]", "model.name=resnet", "data.path=/tmp/some dir/x",
                    "model.init=\"xavier\"", "train.accuracy_targets=[0.9]"});
  EXPECT_EQ(config.train.epochs, 9);  // the override wins over the file
  EXPECT_DOUBLE_EQ(config.optim.lr, 0.05);
  EXPECT_TRUE(config.optim.nesterov);
  EXPECT_EQ(config.model.hidden, (std::vector<std::int64_t>{32, 16}));
  EXPECT_EQ(config.model.name, "resnet");
  EXPECT_EQ(config.data.path, "/tmp/some dir/x");
  EXPECT_EQ(config.model.init, "xavier");
  EXPECT_EQ(config.train.accuracy_targets, (std::vector<double>{0.9}));
}

TEST(Config, OverlapTakesAutoOrABoolean) {
  EXPECT_EQ(parse_config("", "x.toml").data_parallel.overlap, "auto");
  EXPECT_EQ(parse_config("[parallel]\noverlap = false\n", "x.toml").data_parallel.overlap, "false");
  EXPECT_EQ(parse_config("[parallel]\noverlap = true\n", "x.toml").data_parallel.overlap, "true");
  EXPECT_EQ(parse_config("[parallel]\noverlap = \"auto\"\n", "x.toml").data_parallel.overlap,
            "auto");
  EXPECT_EQ(parse_config("", "x.toml", {"parallel.overlap=false"}).data_parallel.overlap, "false");
  EXPECT_THAT(config_error([] { parse_config("[parallel]\noverlap = \"maybe\"\n", "x.toml"); }),
              AllOf(HasSubstr("'parallel.overlap'"), HasSubstr("x.toml"), HasSubstr("\"auto\"")));
  EXPECT_THAT(config_error([] { parse_config("[parallel]\noverlap = 1\n", "x.toml"); }),
              HasSubstr("'parallel.overlap'"));
  // Booleans only where "true" and "false" are among the choices.
  EXPECT_THAT(config_error([] { parse_config("[optim]\nname = true\n", "x.toml"); }),
              HasSubstr("'optim.name'"));
}

TEST(Config, ZeroStageTakesAutoOrAStageNumber) {
  EXPECT_EQ(parse_config("", "x.toml").data_parallel.zero_stage, "auto");
  EXPECT_EQ(parse_config("[parallel]\nzero_stage = 1\n", "x.toml").data_parallel.zero_stage, "1");
  EXPECT_EQ(parse_config("[parallel]\nzero_stage = \"0\"\n", "x.toml").data_parallel.zero_stage,
            "0");
  EXPECT_EQ(parse_config("", "x.toml", {"parallel.zero_stage=1"}).data_parallel.zero_stage, "1");
  EXPECT_THAT(config_error([] { parse_config("[parallel]\nzero_stage = 3\n", "x.toml"); }),
              AllOf(HasSubstr("'parallel.zero_stage'"), HasSubstr("\"auto\"")));
  // "auto" is fine where stage 1 is not: it decides 0 there (zero_policy.h).
  EXPECT_NO_THROW(parse_config("[parallel]\nstrategy = \"ps\"\n", "x.toml"));
  EXPECT_NO_THROW(parse_config("[optim]\nname = \"lars\"\n", "x.toml"));
  // Integers only where numbers are among the choices.
  EXPECT_THAT(config_error([] { parse_config("[optim]\nname = 1\n", "x.toml"); }),
              HasSubstr("'optim.name'"));
}

TEST(Config, FusionBytesTakesAutoOrAByteCount) {
  EXPECT_EQ(parse_config("", "x.toml").data_parallel.bucket_bytes, "auto");
  EXPECT_EQ(parse_config("[parallel]\nfusion_bytes = 0\n", "x.toml").data_parallel.bucket_bytes,
            "0");
  EXPECT_EQ(
      parse_config("", "x.toml", {"parallel.fusion_bytes=1048576"}).data_parallel.bucket_bytes,
      "1048576");
  EXPECT_EQ(
      parse_config("", "x.toml", {"parallel.fusion_bytes=\"auto\""}).data_parallel.bucket_bytes,
      "auto");
  for (const char* bad : {"-1", "\"big\"", "\"12k\"", "\"\""}) {
    EXPECT_THAT(config_error([&] {
                  parse_config(std::string("[parallel]\nfusion_bytes = ") + bad + "\n", "x.toml");
                }),
                AllOf(HasSubstr("'parallel.fusion_bytes'"), HasSubstr("\"auto\" or an integer")))
        << bad;
  }
  // A count is written back as a TOML integer, "auto" as a string; both read back the same.
  const Config counted = parse_config("[parallel]\nfusion_bytes = 256\n", "x.toml");
  EXPECT_THAT(to_toml(counted), HasSubstr("bucket_bytes = 256\n"));
  EXPECT_EQ(parse_config(to_toml(counted), "y.toml").data_parallel.bucket_bytes, "256");
  EXPECT_THAT(to_toml(parse_config("", "x.toml")), HasSubstr("bucket_bytes = \"auto\"\n"));
}

TEST(Config, LaterOverrideWins) {
  const Config config = parse_config("", "x.toml", {"train.epochs=2", "train.epochs=4"});
  EXPECT_EQ(config.train.epochs, 4);
}

TEST(Config, UnknownKeyListsTheAcceptedKeys) {
  const std::string message =
      config_error([] { parse_config("[optim]\nlrr = 0.1\n", "run.toml"); });
  EXPECT_THAT(message, AllOf(HasSubstr("unknown config key 'optim.lrr' in run.toml"),
                             HasSubstr("accepted keys in [optim]: name, lr, momentum, nesterov")));
}

TEST(Config, UnknownKeyInOverride) {
  const std::string message = config_error([] { parse_config("", "run.toml", {"train.epoch=3"}); });
  EXPECT_THAT(message, AllOf(HasSubstr("unknown config key 'train.epoch' in --set train.epoch=3"),
                             HasSubstr("epochs")));
}

TEST(Config, UnknownSectionListsTheSections) {
  const std::string message =
      config_error([] { parse_config("[optimizer]\nlr = 0.1\n", "run.toml"); });
  EXPECT_THAT(message, AllOf(HasSubstr("unknown config section '[optimizer]' in run.toml"),
                             HasSubstr("model, data, train, optim, schedule")));
}

TEST(Config, KeyOutsideASection) {
  const std::string message = config_error([] { parse_config("epochs = 3\n", "run.toml"); });
  EXPECT_THAT(message, HasSubstr("'epochs' in run.toml is outside any section"));
}

TEST(Config, WrongTypeNamesKeyValueAndType) {
  EXPECT_THAT(
      config_error([] { parse_config("[train]\nepochs = \"five\"\n", "run.toml"); }),
      AllOf(HasSubstr("'train.epochs' in run.toml must be an integer"), HasSubstr("\"five\"")));
  EXPECT_THAT(config_error([] { parse_config("[train]\nepochs = 2.5\n", "run.toml"); }),
              AllOf(HasSubstr("'train.epochs'"), HasSubstr("an integer"), HasSubstr("2.5")));
  EXPECT_THAT(config_error([] { parse_config("[optim]\nnesterov = 1\n", "run.toml"); }),
              AllOf(HasSubstr("'optim.nesterov'"), HasSubstr("true or false")));
  EXPECT_THAT(config_error([] { parse_config("[model]\nhidden = [256, \"x\"]\n", "run.toml"); }),
              AllOf(HasSubstr("'model.hidden'"), HasSubstr("a list of integers")));
  EXPECT_THAT(
      config_error([] { parse_config("", "run.toml", {"optim.lr=fast"}); }),
      AllOf(HasSubstr("'optim.lr' in --set optim.lr=fast must be a number"), HasSubstr("'fast'")));
  EXPECT_THAT(config_error([] { parse_config("", "run.toml", {"train.epochs=3.0"}); }),
              HasSubstr("must be an integer"));
}

TEST(Config, OutOfRangeNamesKeyValueAndRange) {
  EXPECT_THAT(config_error([] { parse_config("[optim]\nmomentum = 1.5\n", "run.toml"); }),
              AllOf(HasSubstr("'optim.momentum' = 1.5 in run.toml is out of range"),
                    HasSubstr("0 <= value < 1")));
  EXPECT_THAT(config_error([] { parse_config("[optim]\nlr = 0\n", "run.toml"); }),
              AllOf(HasSubstr("'optim.lr' = 0.0"), HasSubstr("value > 0")));
  EXPECT_THAT(config_error([] { parse_config("", "run.toml", {"train.batch_size=0"}); }),
              AllOf(HasSubstr("'train.batch_size' = 0 in --set train.batch_size=0"),
                    HasSubstr("1 <= value <= 1048576")));
  EXPECT_THAT(config_error([] { parse_config("[model]\nname = \"vgg\"\n", "run.toml"); }),
              AllOf(HasSubstr("'model.name' = \"vgg\""),
                    HasSubstr("one of \"mlp\", \"lenet5\", \"resnet\"")));
  EXPECT_THAT(config_error([] { parse_config("[model]\nhidden = [256, 0]\n", "run.toml"); }),
              AllOf(HasSubstr("'model.hidden' = [256, 0]"), HasSubstr("each element >= 1")));
  EXPECT_THAT(
      config_error([] { parse_config("[train]\naccuracy_targets = [0.8, 1.2]\n", "run.toml"); }),
      AllOf(HasSubstr("'train.accuracy_targets'"), HasSubstr("0 < each element <= 1")));
}

TEST(Config, CrossKeyChecks) {
  EXPECT_THAT(config_error([] {
                parse_config(
                    "[schedule]\nwarmup = \"gradual\"\nwarmup_steps = 5\nwarmup_epochs = 1\n",
                    "run.toml");
              }),
              HasSubstr("set only one"));
  EXPECT_THAT(config_error([] { parse_config("[schedule]\nwarmup = \"constant\"\n", "run.toml"); }),
              HasSubstr("needs a length"));
  EXPECT_THAT(config_error([] { parse_config("[schedule]\ndecay = \"step\"\n", "run.toml"); }),
              HasSubstr("schedule.step_size"));
  EXPECT_THAT(config_error([] { parse_config("[data]\nsynthetic_shape = [1, 8]\n", "run.toml"); }),
              HasSubstr("3 sizes (C, H, W)"));
  // ZeRO-1 shards only allreduce training, and cuts tensors, which LARS's norms cannot take.
  EXPECT_THAT(config_error([] {
                parse_config("[parallel]\nzero_stage = 1\nstrategy = \"ps\"\n", "run.toml");
              }),
              HasSubstr("shards the optimizer of allreduce training"));
  EXPECT_THAT(config_error([] {
                parse_config("[parallel]\nfused_update = true\nstrategy = \"hogwild\"\n",
                             "run.toml");
              }),
              AllOf(HasSubstr("'parallel.fused_update' = true"), HasSubstr("\"hogwild\"")));
  EXPECT_THAT(config_error([] {
                parse_config("[parallel]\nzero_stage = 1\n[optim]\nname = \"lars\"\n", "run.toml");
              }),
              HasSubstr("a ZeRO shard"));
  EXPECT_THAT(config_error([] { parse_config("[parallel]\nzero_stage = 2\n", "run.toml"); }),
              HasSubstr("zero_stage"));
}

TEST(Config, MalformedTomlNamesFileAndLine) {
  EXPECT_THAT(config_error([] { parse_config("[train]\nepochs = = 3\n", "bad.toml"); }),
              AllOf(HasSubstr("cannot parse config bad.toml at line 2"), HasSubstr("column")));
}

TEST(Config, MalformedOverride) {
  EXPECT_THAT(config_error([] { parse_config("", "x.toml", {"epochs=3"}); }),
              HasSubstr("expected section.key=value"));
  EXPECT_THAT(config_error([] { parse_config("", "x.toml", {"train.epochs"}); }),
              HasSubstr("expected section.key=value"));
}

TEST(Config, MissingFile) {
  EXPECT_THAT(config_error([] { load_config("/nonexistent/dtrain/run.toml"); }),
              HasSubstr("cannot open config file /nonexistent/dtrain/run.toml"));
  // A directory opens as a stream that reads nothing: it must not train on the defaults.
  EXPECT_THAT(config_error([] { load_config("/tmp"); }),
              AllOf(HasSubstr("config file /tmp is a directory"), HasSubstr("TOML file")));
}

TEST(Config, IgnoredSettingsNameASectionReadByAnotherStrategy) {
  Config config;
  EXPECT_TRUE(ignored_settings(config).empty());
  config.parameter_server.consistency = "ssp";
  config.parameter_server.backup_workers = 1;
  const std::vector<std::string> ignored = ignored_settings(config);
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_THAT(ignored[0], AllOf(HasSubstr("[parameter_server] keys are ignored"),
                                HasSubstr("\"data_parallel\"")));
  config.parallel.strategy = "parameter_server";
  EXPECT_TRUE(ignored_settings(config).empty());
  config.data_parallel.bucket_bytes = "0";
  EXPECT_THAT(ignored_settings(config), ElementsAre(HasSubstr("[data_parallel] keys are ignored")));
}

// --straggler sleeps in LocalGradients::compute, which the pipeline never calls and whose tensor
// groups run as one rank: said once at the start, not silently measured as no straggler.
TEST(Config, IgnoredSettingsNameAStragglerThePipelineAndTensorSplitIgnore) {
  Config config;
  config.parallel.straggler = "rank=1,delay_ms=50";
  EXPECT_TRUE(ignored_settings(config).empty());  // data_parallel injects it
  config.parallel.strategy = "pipeline";
  EXPECT_THAT(ignored_settings(config),
              ElementsAre(AllOf(HasSubstr("parallel.straggler = \"rank=1,delay_ms=50\""),
                                HasSubstr("ignored by parallel.strategy = \"pipeline\";"))));
  config.parallel.strategy = "tensor_parallel";
  EXPECT_THAT(ignored_settings(config),
              ElementsAre(AllOf(HasSubstr("ignored by parallel.strategy = \"tensor_parallel\""),
                                HasSubstr("rank=0 or a random delay slows all of them alike"))));
}

// Keys that moved to a strategy's section keep their old names as aliases that warn; errors name
// the key as it was written; resolved.toml writes the new names.
TEST(Config, OldKeyNamesStillWorkAndWarn) {
  const Config old = parse_config(
      "[parallel]\nstrategy = \"ps\"\nservers = 2\nconsistency = \"async\"\npull_every = 3\n",
      "old.toml", {"parallel.colocate_servers=true"});
  EXPECT_EQ(old.parallel.strategy, "parameter_server");
  EXPECT_EQ(old.parameter_server.servers, 2);
  EXPECT_EQ(old.parameter_server.consistency, "async");
  EXPECT_EQ(old.parameter_server.pull_every, 3);
  EXPECT_TRUE(old.parameter_server.colocate_servers);
  EXPECT_THAT(ignored_settings(old),
              AllOf(Contains(AllOf(HasSubstr("\"ps\" in old.toml is the old name of"),
                                   HasSubstr("\"parameter_server\""))),
                    Contains(HasSubstr("'parallel.servers' in old.toml is the old name of "
                                       "'parameter_server.servers'")),
                    Contains(HasSubstr("'parallel.colocate_servers' in --set"))));
  const Config fresh = parse_config(
      "[parallel]\nstrategy = \"parameter_server\"\n[parameter_server]\nservers = 2\n"
      "consistency = \"async\"\npull_every = 3\ncolocate_servers = true\n",
      "new.toml");
  EXPECT_EQ(old, fresh);
  EXPECT_TRUE(ignored_settings(fresh).empty());
  const std::string written = to_toml(old);
  EXPECT_THAT(written, AllOf(HasSubstr("[parameter_server]\n"), HasSubstr("servers = 2\n"),
                             HasSubstr("strategy = \"parameter_server\"\n")));
  EXPECT_EQ(parse_config(written, "resolved.toml"), old);

  const Config dp = parse_config("[parallel]\nstrategy = \"allreduce\"\nfused_update = false\n",
                                 "old.toml", {"parallel.fusion_bytes=0"});
  EXPECT_EQ(dp.parallel.strategy, "data_parallel");
  EXPECT_EQ(dp.data_parallel.sum_in_update, "false");
  EXPECT_EQ(dp.data_parallel.bucket_bytes, "0");
  EXPECT_EQ(canonical_key("parallel.fused_update"), "data_parallel.sum_in_update");
  EXPECT_EQ(canonical_key("optim.lr"), "optim.lr");

  // Errors name the key as written, old or new.
  EXPECT_THAT(config_error([] { parse_config("", "x.toml", {"parallel.staleness=-1"}); }),
              HasSubstr("'parallel.staleness' = -1"));
  EXPECT_THAT(config_error([] { parse_config("", "x.toml", {"parameter_server.staleness=-1"}); }),
              HasSubstr("'parameter_server.staleness' = -1"));
  EXPECT_THAT(config_error([] { parse_config("[parallel]\nservers = \"two\"\n", "x.toml"); }),
              HasSubstr("'parallel.servers' in x.toml must be an integer"));
  EXPECT_THAT(
      config_error([] { parse_config("[parameter_server]\nbackup_workers = 1\n", "x.toml"); }),
      HasSubstr("'parameter_server.backup_workers' = 1"));
  // The old names belong to [parallel] only.
  EXPECT_THAT(config_error([] { parse_config("[data_parallel]\nfusion_bytes = 0\n", "x.toml"); }),
              HasSubstr("unknown config key 'data_parallel.fusion_bytes'"));
}

// parameter_server.compression: every codec a server can decode (not PowerSGD), checked under
// that strategy only; pulls take casts only.
TEST(Config, ParameterServerCompressionTakesWhatAServerCanDecode) {
  const std::string ps = "[parallel]\nstrategy = \"parameter_server\"\n[parameter_server]\n";
  const Config config =
      parse_config(ps + "compression = \"topk:0.01\"\npull_compression = \"fp16\"\n", "x.toml");
  EXPECT_EQ(config.parameter_server.compression, "topk:0.01");
  EXPECT_EQ(config.parameter_server.pull_compression, "fp16");
  EXPECT_THAT(config_error([&] { parse_config(ps + "compression = \"powersgd:2\"\n", "x.toml"); }),
              AllOf(HasSubstr("'parameter_server.compression' = \"powersgd:2\""),
                    HasSubstr("one worker's push")));
  EXPECT_THAT(config_error([&] { parse_config(ps + "compression = \"topk:0\"\n", "x.toml"); }),
              AllOf(HasSubstr("'parameter_server.compression'"), HasSubstr("accepted")));
  EXPECT_THAT(
      config_error([&] { parse_config(ps + "pull_compression = \"topk:0.1\"\n", "x.toml"); }),
      AllOf(HasSubstr("parameter_server.pull_compression"), HasSubstr("fp16")));
}

TEST(Config, CompressionTakesACodecOfTheCatalog) {
  EXPECT_EQ(parse_config("", "x.toml").data_parallel.compression, "none");
  EXPECT_EQ(
      parse_config("", "x.toml", {"data_parallel.compression=topk:0.01"}).data_parallel.compression,
      "topk:0.01");
  for (const char* bad : {"topk:0", "zip", "qsgd:1", "powersgd:0", "topk:1.5"}) {
    EXPECT_THAT(config_error([&] {
                  parse_config("", "x.toml", {std::string("data_parallel.compression=") + bad});
                }),
                AllOf(HasSubstr("'data_parallel.compression'"), HasSubstr(bad),
                      HasSubstr("--set data_parallel.compression=")))
        << bad;
  }
  // A compressed bucket is exchanged whole: ZeRO-1 (reduce-scatter) does not apply.
  EXPECT_THAT(config_error([] {
                parse_config("[data_parallel]\nzero_stage = 1\ncompression = \"fp16\"\n", "x.toml");
              }),
              AllOf(HasSubstr("'data_parallel.zero_stage' = 1"), HasSubstr("exchanged whole")));
  EXPECT_NO_THROW(
      parse_config("[data_parallel]\ncompression = \"powersgd:2\"\n"
                   "error_feedback = false\n",
                   "x.toml"));
}

TEST(Config, RobustAggregationChecksItsNumbers) {
  const Config defaults = parse_config("", "x.toml");
  EXPECT_EQ(defaults.data_parallel.aggregator, "mean");
  EXPECT_EQ(defaults.data_parallel.attack, "none");
  EXPECT_EQ(defaults.data_parallel.byzantine, 0);
  // P = 8 ranks (parallel.workers) under each set of overrides.
  const auto with = [](const std::vector<std::string>& sets) {
    return parse_config("[parallel]\nworkers = 8\n", "x.toml", sets);
  };
  EXPECT_NO_THROW(with({"data_parallel.aggregator=trimmed:0.25", "data_parallel.attack=alie",
                        "data_parallel.byzantine=2"}));
  EXPECT_NO_THROW(with({"data_parallel.aggregator=krum", "data_parallel.byzantine=2"}));
  EXPECT_NO_THROW(with({"data_parallel.attack=labelflip", "data_parallel.byzantine=1"}));
  // Krum on 8 ranks tolerates f = 2 (8 > 6), not 3.
  EXPECT_THAT(config_error([&] {
                with({"data_parallel.aggregator=krum", "data_parallel.byzantine=3"});
              }),
              AllOf(HasSubstr("'data_parallel.aggregator' = \"krum\""), HasSubstr("P = 8"),
                    HasSubstr("n > 2f + 2 = 8")));
  EXPECT_THAT(config_error([&] { with({"data_parallel.aggregator=mode"}); }),
              AllOf(HasSubstr("'data_parallel.aggregator' = \"mode\""), HasSubstr("accepted")));
  EXPECT_THAT(config_error([&] { with({"data_parallel.attack=shout"}); }),
              AllOf(HasSubstr("'data_parallel.attack' = \"shout\""), HasSubstr("labelflip")));
  EXPECT_THAT(config_error([&] { with({"data_parallel.attack=signflip"}); }),
              HasSubstr("needs data_parallel.byzantine >= 1"));
  EXPECT_THAT(config_error([&] {
                with({"data_parallel.attack=signflip", "data_parallel.byzantine=8"});
              }),
              AllOf(HasSubstr("'data_parallel.byzantine' = 8"), HasSubstr("f < P = 8")));
  // ALIE's z formula needs f <= P/2.
  EXPECT_THAT(config_error([&] {
                with({"data_parallel.aggregator=median", "data_parallel.attack=alie",
                      "data_parallel.byzantine=5"});
              }),
              HasSubstr("'data_parallel.attack' = \"alie\""));
  EXPECT_THAT(
      config_error([&] {
        with({"data_parallel.aggregator=median", "data_parallel.compression=fp16"});
      }),
      AllOf(HasSubstr("'data_parallel.compression' = \"fp16\""), HasSubstr("do not go together")));
  EXPECT_THAT(config_error([&] {
                with({"data_parallel.aggregator=median", "data_parallel.zero_stage=1"});
              }),
              AllOf(HasSubstr("'data_parallel.zero_stage' = 1"), HasSubstr("whole gradient")));
  // Worker momentum replaces the optimizer's, and needs the robust path.
  EXPECT_NO_THROW(with({"data_parallel.aggregator=median", "data_parallel.worker_momentum=0.9",
                        "optim.momentum=0"}));
  EXPECT_THAT(config_error([&] {
                with({"data_parallel.aggregator=median", "data_parallel.worker_momentum=0.9",
                      "optim.momentum=0.9"});
              }),
              AllOf(HasSubstr("'data_parallel.worker_momentum' = 0.9"),
                    HasSubstr("'optim.momentum' = 0.9"), HasSubstr("set optim.momentum = 0")));
  EXPECT_THAT(config_error([&] {
                with({"data_parallel.worker_momentum=0.9", "optim.momentum=0"});
              }),
              AllOf(HasSubstr("'data_parallel.worker_momentum' = 0.9"), HasSubstr("needs robust")));
}

TEST(Config, ResolvedTomlSaysWhichStrategyReadsASection) {
  const std::string written = to_toml(Config{});
  EXPECT_THAT(written, AllOf(HasSubstr("[data_parallel]\n# read by parallel.strategy = "
                                       "\"data_parallel\" only"),
                             HasSubstr("[parameter_server]\n# read by parallel.strategy = "
                                       "\"parameter_server\" only"),
                             HasSubstr("[local_sgd]\n# read by parallel.strategy = "
                                       "\"local_sgd\" only")));
}

TEST(Config, ResolvedTomlReadsBackIdentically) {
  Config config;
  config.model.name = "resnet";
  config.model.hidden = {};
  config.model.dropout = 0.1;  // not exactly representable: must survive the text round trip
  config.data.path = "/data/with \"quotes\" and \\ backslash";
  config.data.synthetic_noise = 1.0 / 3.0;
  config.train.accuracy_targets = {0.85, 0.875, 1.0};
  config.optim.lr = 0.1 * 3;
  config.optim.eps = 1e-12;
  config.schedule.decay = "cosine";
  config.schedule.min_lr = 1e-5;
  const std::string text = to_toml(config);
  const Config again = parse_config(text, "resolved.toml");
  EXPECT_EQ(again, config) << text;
  EXPECT_EQ(to_toml(again), text);
}

TEST(Config, LoadsFromAFileWithOverrides) {
  const auto path = std::filesystem::temp_directory_path() / "dtrain_config_test.toml";
  {
    std::ofstream out(path);
    out << "[train]\nepochs = 3\nbatch_size = 64\n";
  }
  const Config config = load_config(path.string(), {"train.batch_size=32"});
  EXPECT_EQ(config.train.epochs, 3);
  EXPECT_EQ(config.train.batch_size, 32);
  std::filesystem::remove(path);
}

TEST(Config, EveryKeyIsWrittenAndUnique) {
  const auto keys = config_keys();
  const std::string text = to_toml(Config{});
  std::set<std::string> seen;
  for (const auto& key : keys) {
    EXPECT_TRUE(seen.insert(key).second) << key << " listed twice";
    const std::string bare = key.substr(key.find('.') + 1);
    EXPECT_THAT(text, HasSubstr("\n" + bare + " = ")) << key;
  }
  EXPECT_GE(keys.size(), 40u);
}

TEST(Config, ValidateChecksAConfigBuiltInCode) {
  Config config;
  config.train.epochs = 0;
  EXPECT_THAT(config_error([&] { validate(config); }),
              AllOf(HasSubstr("'train.epochs' = 0 in the configuration"), HasSubstr("1 <=")));
  Config fine;
  EXPECT_NO_THROW(validate(fine));
}

}  // namespace
}  // namespace dtrain::train
