// What a resumed run carries over besides its model and optimizer state: the records of
// metrics.jsonl up to its checkpoint, and the accuracy targets reached before it. One definition
// for every run loop that checkpoints (the Trainer, Hogwild!, federated averaging).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dtrain/train/checkpoint.h"
#include "dtrain/train/metrics.h"

namespace dtrain::train {

// A resumed run repeats what came after its checkpoint, so the records the interrupted run wrote
// for it are dropped first and metrics.jsonl reads as one uninterrupted run. A record is kept when
// its "step" is <= `step` (when both are given) or else its "epoch" is <= `epoch`; a torn last
// line is dropped. Rewrites the file atomically; nothing when it does not exist.
void drop_records_after(const std::string& path, std::int64_t epoch,
                        std::optional<std::int64_t> step = std::nullopt);

// The checkpoint scalar holding target `target`'s time to accuracy ("tta:0.85"; -1: not reached).
std::string accuracy_target_scalar(double target);
// Appends one such scalar per target to `checkpoint`'s scalars.
void save_accuracy_targets(const AccuracyTargets& targets, Checkpoint& checkpoint);
// Sets the targets `checkpoint` records as reached.
void restore_accuracy_targets(const Checkpoint& checkpoint, AccuracyTargets& targets);

}  // namespace dtrain::train
