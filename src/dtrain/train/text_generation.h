// Sampling text from a trained byte-level language model (`dtrain generate`): the run folder's
// resolved.toml rebuilds the model, its newest checkpoint fills the parameters, and the model
// extends the prompt one byte at a time.
//
// Each new byte: forward of the last min(length, block) bytes, (1, T) -> logits (1, T, 256); the
// last position's logits divided by the temperature go through a softmax and one draw from
// Rng(seed, n) picks the byte (temperature 0: the most likely byte). Cost per byte: one forward of
// up to `block` tokens, about 1/3 of the 5.7 MFLOP per token of a training step at the shipped
// size (docs/TRANSFORMER.md), so ~1 ms per byte on one core.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain::train {

struct GenerateOptions {
  std::string run_dir;       // a `dtrain train` run folder of a gpt model
  std::string prompt;        // bytes to continue; not empty
  std::int64_t bytes = 200;  // bytes to add
  double temperature = 1.0;  // 0: greedy
  std::uint64_t seed = 0;
};

// The prompt followed by `bytes` sampled bytes. ConfigError for a run that is not a gpt run, an
// empty prompt, a prompt with a byte that never occurs in the training text (the model learnt
// nothing about it) or options out of range; CheckpointError for a run without a checkpoint.
std::string generate_text(const GenerateOptions& options);

}  // namespace dtrain::train
