#include "dtrain/train/text_generation.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/rng.h"
#include "dtrain/data/text_corpus.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/checkpoint_dir.h"
#include "dtrain/train/config.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

// Which bytes the training split holds (indexed by byte value), or an empty vector when the corpus
// cannot be read any more (moved since training): the check is then skipped with a warning.
std::vector<bool> training_bytes(const DataSection& data) {
  std::string text;
  try {
    text = data::read_text_corpus(data.path);
  } catch (const DataError& e) {
    log::warn("cannot check the prompt against the training text: {}", e.what());
    return {};
  }
  const auto train_end =
      static_cast<std::size_t>(static_cast<double>(text.size()) * (1.0 - data.text_holdout));
  std::vector<bool> seen(256, false);
  for (std::size_t i = 0; i < train_end; ++i) seen[static_cast<unsigned char>(text[i])] = true;
  return seen;
}

// One byte drawn from the softmax of logits / temperature (argmax when temperature is 0).
int sample_byte(const float* logits, double temperature, Rng& rng) {
  if (temperature == 0.0) {
    return static_cast<int>(std::max_element(logits, logits + 256) - logits);
  }
  std::array<double, 256> p{};
  const double max = *std::max_element(logits, logits + 256);
  double sum = 0.0;
  for (int v = 0; v < 256; ++v) {
    p[static_cast<std::size_t>(v)] = std::exp((logits[v] - max) / temperature);
    sum += p[static_cast<std::size_t>(v)];
  }
  double u = static_cast<double>(rng.uniform()) * sum;
  for (int v = 0; v < 256; ++v) {
    u -= p[static_cast<std::size_t>(v)];
    if (u < 0.0) return v;
  }
  return 255;
}

// When a run with these settings writes its first checkpoint file (the memory tier is not one a
// later process reads): each cadence that is on, whichever comes first.
std::string first_checkpoint_when(const TrainSection& train) {
  std::vector<std::string> when;
  if (train.checkpoint_every_steps > 0) {
    when.push_back(
        fmt::format("after step {} (train.checkpoint_every_steps)", train.checkpoint_every_steps));
  }
  if (train.checkpoint_every_seconds > 0.0) {
    when.push_back(fmt::format("after {:.3g} s of training (train.checkpoint_every_seconds)",
                               train.checkpoint_every_seconds));
  } else if (train.mtbf_hours > 0.0) {
    when.push_back("after the Young/Daly interval of train.mtbf_hours");
  }
  when.push_back(
      train.checkpoint_every > 0
          ? fmt::format("at the end of epoch {} (train.checkpoint_every)", train.checkpoint_every)
          : std::string("at the end of the run (train.checkpoint_every = 0)"));
  std::string text = when[0];
  for (std::size_t i = 1; i < when.size(); ++i) {
    text += (i + 1 == when.size() ? ", or " : ", ") + when[i];
  }
  return when.size() > 1 ? text + ", whichever comes first" : text;
}

}  // namespace

std::string generate_text(const GenerateOptions& options) {
  const fs::path run(options.run_dir);
  const std::string resolved = (run / "resolved.toml").string();
  if (!fs::exists(resolved)) {
    throw ConfigError(fmt::format(
        "--run {}: {} is missing; pass the folder of a `dtrain train` run of a gpt model",
        options.run_dir, resolved));
  }
  if (options.bytes < 1) {
    throw ConfigError(fmt::format("--bytes {} is not >= 1", options.bytes));
  }
  if (!(options.temperature >= 0.0) || !std::isfinite(options.temperature)) {
    throw ConfigError(
        fmt::format("--temperature {} is not a finite number >= 0 (0: always the most likely byte)",
                    options.temperature));
  }
  if (options.prompt.empty()) {
    throw ConfigError("--prompt is empty; give the text to continue, e.g. --prompt \"Q: \"");
  }
  const Config config = load_config(resolved);
  // A text run is a gpt or a layer list that starts with an embedding (validate() holds to that).
  if (config.data.dataset != "text") {
    throw ConfigError(fmt::format(
        "--run {} trained model.name = \"{}\"; dtrain generate samples text from gpt runs and "
        "layer lists that start with an embedding (examples/fortunes_gpt.toml, "
        "examples/models/gpt.toml)",
        options.run_dir, config.model.name));
  }
  const std::vector<bool> seen = training_bytes(config.data);
  for (std::size_t i = 0; i < options.prompt.size() && !seen.empty(); ++i) {
    const auto byte = static_cast<unsigned char>(options.prompt[i]);
    if (!seen[byte]) {
      throw ConfigError(fmt::format(
          "--prompt byte {} (0x{:02x}) never occurs in the training text under {}; the model "
          "learnt nothing about it: leave it out",
          i, byte, config.data.path));
    }
  }

  const std::int64_t block = config.data.block;
  auto model = nn::build_model(model_spec(config.model, {block}, 256));
  // The newest checkpoint that verifies (a damaged newest one is passed over with a warning).
  const CheckpointDir checkpoints((run / "checkpoints").string(), 0);
  if (!checkpoints.has_any()) {
    throw CheckpointError(fmt::format(
        "no checkpoint to generate from: {} holds none yet; this run writes its first {}: wait "
        "for it, or if the run has stopped, continue it with `dtrain train --resume {}`",
        checkpoints.folder(), first_checkpoint_when(config.train), options.run_dir));
  }
  const VerifiedCheckpoint newest = checkpoints.newest_good();
  restore_into(newest.checkpoint, model->store(), newest.path);

  std::string text = options.prompt;
  Rng rng(options.seed, rng_stream(0x67656e /* "gen" */));
  tensor::Tensor x;
  for (std::int64_t n = 0; n < options.bytes; ++n) {
    const auto length = static_cast<std::int64_t>(text.size());
    const std::int64_t t = std::min(length, block);
    x.ensure_shape({1, t});
    for (std::int64_t i = 0; i < t; ++i) {
      x.data()[i] = static_cast<float>(static_cast<unsigned char>(text[length - t + i]));
    }
    const tensor::Tensor& logits = model->forward(x, nn::ForwardContext{nn::Mode::kEval, 0, 0});
    text += static_cast<char>(sample_byte(logits.data() + (t - 1) * 256, options.temperature, rng));
  }
  return text;
}

}  // namespace dtrain::train
