#include "dtrain/train/resume_records.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dtrain/train/atomic_file.h"

namespace dtrain::train {
namespace {

constexpr double kNotReached = -1.0;

}  // namespace

void drop_records_after(const std::string& path, std::int64_t epoch,
                        std::optional<std::int64_t> step) {
  if (!std::filesystem::exists(path)) return;
  std::istringstream in(read_whole_file(path));
  std::string kept;
  std::string line;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.contains("epoch")) continue;  // a torn last line
    const bool before = step && record.contains("step")
                            ? record["step"].get<std::int64_t>() <= *step
                            : record["epoch"].get<std::int64_t>() <= epoch;
    if (before) kept += line + "\n";
  }
  write_file_atomically(path, kept);
}

std::string accuracy_target_scalar(double target) { return "tta:" + AccuracyTargets::key(target); }

void save_accuracy_targets(const AccuracyTargets& targets, Checkpoint& checkpoint) {
  for (std::size_t i = 0; i < targets.targets().size(); ++i) {
    const auto& reached = targets.reached()[i];
    checkpoint.scalars.emplace_back(accuracy_target_scalar(targets.targets()[i]),
                                    reached ? *reached : kNotReached);
  }
}

void restore_accuracy_targets(const Checkpoint& checkpoint, AccuracyTargets& targets) {
  for (std::size_t i = 0; i < targets.targets().size(); ++i) {
    const double seconds =
        checkpoint.scalar(accuracy_target_scalar(targets.targets()[i]), kNotReached);
    if (seconds >= 0.0) targets.set_reached(i, seconds);
  }
}

}  // namespace dtrain::train
