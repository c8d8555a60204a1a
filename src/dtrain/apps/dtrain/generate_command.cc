// dtrain generate: samples text from the newest checkpoint of a gpt run (train/text_generation.h).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli_checks.h"
#include "commands.h"
#include "dtrain/train/text_generation.h"

namespace dtrain::apps {

Command add_generate_command(CLI::App& app) {
  auto options = std::make_shared<train::GenerateOptions>();
  CLI::App* sub = app.add_subcommand(
      "generate",
      "Continues a prompt with text sampled from a trained byte-level language model (a run of "
      "model.name = \"gpt\", e.g. examples/fortunes_gpt.toml): its newest checkpoint, one byte at "
      "a time from the softmax of the last position's logits / --temperature.");
  sub->footer(R"(
Examples:
  dtrain train --config examples/fortunes_gpt.toml --out runs/gpt
  dtrain generate --run runs/gpt --prompt "Q: " --bytes 300
  dtrain generate --run runs/gpt --prompt "The " --temperature 0.7 --seed 3
  dtrain generate --run runs/gpt --prompt "A" --temperature 0     # the most likely bytes)");
  sub->add_option("--run,-r", options->run_dir,
                  "run folder of a gpt model (its resolved.toml and "
                  "checkpoints/)")
      ->required()
      ->check(non_empty_path());
  sub->add_option("--prompt,-p", options->prompt,
                  "text to continue (its bytes must occur in the "
                  "training text)")
      ->required();
  sub->add_option("--bytes,-n", options->bytes, "bytes to generate (default 200)")
      ->check(at_least(1));
  sub->add_option("--temperature,-t", options->temperature,
                  "softmax temperature: 1 samples the model's distribution (default), lower is "
                  "more conservative, 0 always takes the most likely byte");
  sub->add_option("--seed", options->seed,
                  "seed of the draws (default 0: the same text each time)");
  return Command{sub, [options] {
                   fmt::print("{}\n", train::generate_text(*options));
                   return 0;
                 }};
}

}  // namespace dtrain::apps
