#include "dtrain/optim/optimizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <utility>

#include "dtrain/base/error.h"
#include "dtrain/optim/adam.h"
#include "dtrain/optim/lars.h"
#include "dtrain/optim/onebit_adam.h"
#include "dtrain/optim/sgd.h"

namespace dtrain::optim {

Optimizer::Optimizer(std::vector<Segment> segments) : segments_(std::move(segments)) {
  for (const Segment& segment : segments_) {
    if (segment.offset < 0 || segment.numel < 0) {
      throw ConfigError(fmt::format(
          "optimizer segment '{}' has offset {} and numel {}; both must be >= 0 (segments are "
          "[offset, offset + numel) ranges of the flat parameter buffer)",
          segment.name, segment.offset, segment.numel));
    }
  }
  // Two segments sharing an element would update it twice per step.
  std::vector<std::size_t> order(segments_.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [this](std::size_t a, std::size_t b) {
    return segments_[a].offset < segments_[b].offset;
  });
  const Segment* previous = nullptr;
  for (std::size_t index : order) {
    const Segment& segment = segments_[index];
    if (segment.numel == 0) continue;
    if (previous != nullptr && previous->offset + previous->numel > segment.offset) {
      throw ConfigError(fmt::format(
          "optimizer segments '{}' [{}, {}) and '{}' [{}, {}) overlap; every parameter must "
          "belong to at most one segment",
          previous->name, previous->offset, previous->offset + previous->numel, segment.name,
          segment.offset, segment.offset + segment.numel));
    }
    previous = &segment;
  }

  state_offsets_.reserve(segments_.size());
  for (const Segment& segment : segments_) {
    state_offsets_.push_back(state_numel_);
    if (segment.numel == 0) {
      continue;
    }
    if (!ranges_.empty()) {
      Range& last = ranges_.back();
      if (last.param_offset + last.numel == segment.offset &&
          last.weight_decay == segment.weight_decay) {
        last.numel += segment.numel;
        state_numel_ += segment.numel;
        continue;
      }
    }
    ranges_.push_back(Range{segment.offset, state_numel_, segment.numel, segment.weight_decay});
    state_numel_ += segment.numel;
  }
}

void Optimizer::step_range(float* /*params*/, std::span<const float* const> /*grads*/,
                           double /*lr*/, std::int64_t /*begin*/, std::int64_t /*end*/) {
  throw InternalError("Optimizer::step_range on an optimizer that does not update in parts");
}

void Optimizer::place_state(const float* params, const float* grads,
                            std::initializer_list<PlacedFloats*> states) {
  if (ranges_.empty()) return;
  place_at(PlacedFloats::page_offset_of(params + anchor().param_offset),
           PlacedFloats::page_offset_of(grads + anchor().param_offset), states);
}

void Optimizer::place_state_for_range(const float* params,
                                      std::initializer_list<PlacedFloats*> states) {
  if (ranges_.empty()) return;
  const std::size_t p = PlacedFloats::page_offset_of(params + anchor().param_offset);
  place_at(p, (p + PlacedFloats::kHalfPage) % PlacedFloats::kPageBytes, states);
}

const Optimizer::Range& Optimizer::anchor() const {
  return *std::max_element(ranges_.begin(), ranges_.end(),
                           [](const Range& a, const Range& b) { return a.numel < b.numel; });
}

void Optimizer::place_at(std::size_t p, std::size_t g,
                         std::initializer_list<PlacedFloats*> states) {
  const Range& anchor = this->anchor();
  constexpr std::size_t kPage = PlacedFloats::kPageBytes;
  // The three quarter points after the parameters, farthest from the gradients first (an array:
  // this runs every step, which allocates nothing).
  std::array<std::size_t, 3> slots{};
  for (std::size_t q = 1; q <= 3; ++q) slots[q - 1] = (p + q * PlacedFloats::kQuarterPage) % kPage;
  auto distance_to_grads = [g](std::size_t at) {
    const std::size_t d = (at + kPage - g) % kPage;
    return std::min(d, kPage - d);
  };
  std::stable_sort(slots.begin(), slots.end(), [&](std::size_t a, std::size_t b) {
    return distance_to_grads(a) > distance_to_grads(b);
  });
  std::size_t i = 0;
  for (PlacedFloats* state : states) {
    const std::size_t at = slots[i++ % slots.size()];
    // state->data() + anchor.state_offset must land on `at`.
    const std::size_t shift = static_cast<std::size_t>(anchor.state_offset) * sizeof(float) % kPage;
    state->move_to((at + kPage - shift) % kPage);
  }
}

void Optimizer::check_state(const std::vector<StateTensor>& state,
                            const std::vector<std::string>& names, std::int64_t steps) const {
  const auto joined = [](const std::vector<std::string>& list) {
    return list.empty() ? std::string("none") : fmt::format("'{}'", fmt::join(list, "', '"));
  };
  std::vector<std::string> got;
  got.reserve(state.size());
  for (const StateTensor& tensor : state) got.push_back(tensor.name);
  if (got != names) {
    throw CheckpointError(fmt::format(
        "optimizer state mismatch: this optimizer expects state {}, the checkpoint holds {}; "
        "resume with the optimizer settings the checkpoint was written with",
        joined(names), joined(got)));
  }
  for (const StateTensor& tensor : state) {
    const auto size = static_cast<std::int64_t>(tensor.values.size());
    if (size != state_numel_) {
      throw CheckpointError(
          fmt::format("optimizer state '{}' has {} floats in the checkpoint, this optimizer "
                      "expects {} (the sum "
                      "of its {} segments); the checkpoint belongs to another model or shard",
                      tensor.name, size, state_numel_, segments_.size()));
    }
    for (std::int64_t i = 0; i < size; ++i) {
      if (!std::isfinite(tensor.values[static_cast<std::size_t>(i)])) {
        throw CheckpointError(fmt::format(
            "optimizer state '{}' holds a non-finite value ({}) at element {}; the checkpoint is "
            "corrupt or was written after the run diverged",
            tensor.name, tensor.values[static_cast<std::size_t>(i)], i));
      }
    }
  }
  if (steps < 0) {
    throw CheckpointError(
        fmt::format("optimizer step count {} in the checkpoint must be >= 0", steps));
  }
}

namespace {

void require(bool ok, const char* key, double value, const char* range) {
  if (!ok) {
    throw ConfigError(fmt::format("{} = {} is out of range: must be {}", key, value, range));
  }
}

}  // namespace

void validate_optimizer_config(const OptimizerConfig& config) {
  const std::string& name = config.name;
  if (name != "sgd" && name != "adam" && name != "adamw" && name != "lars" &&
      name != "onebit_adam") {
    throw ConfigError(fmt::format(
        "optim.name = '{}' is not an optimizer; accepted: 'sgd', 'adam', 'adamw', 'lars', "
        "'onebit_adam'",
        name));
  }
  if (name == "onebit_adam" && config.freeze_step < 1) {
    throw ConfigError(fmt::format(
        "optim.freeze_step = {} is out of range: must be >= 1 (1-bit Adam freezes the variance "
        "that the warm-up's exact Adam steps estimate)",
        config.freeze_step));
  }
  require(config.momentum >= 0.0 && config.momentum < 1.0, "optim.momentum", config.momentum,
          "in [0, 1)");
  require(config.weight_decay >= 0.0 && std::isfinite(config.weight_decay), "optim.weight_decay",
          config.weight_decay, ">= 0");
  require(config.beta1 >= 0.0 && config.beta1 < 1.0, "optim.beta1", config.beta1, "in [0, 1)");
  require(config.beta2 >= 0.0 && config.beta2 < 1.0, "optim.beta2", config.beta2, "in [0, 1)");
  require(config.eps > 0.0 && std::isfinite(config.eps), "optim.eps", config.eps, "> 0");
  require(config.trust_coefficient > 0.0 && std::isfinite(config.trust_coefficient),
          "optim.trust_coefficient", config.trust_coefficient, "> 0");
  require(config.lars_eps >= 0.0 && std::isfinite(config.lars_eps), "optim.lars_eps",
          config.lars_eps, ">= 0");
  if (config.nesterov && name != "sgd") {
    throw ConfigError(fmt::format(
        "optim.nesterov = true applies only to optim.name = 'sgd', not '{}'; remove it", name));
  }
  if (config.nesterov && config.momentum == 0.0) {
    throw ConfigError(
        "optim.nesterov = true needs optim.momentum > 0 (got 0); set a momentum such as 0.9");
  }
  if ((name == "adam" || name == "adamw" || name == "onebit_adam") && config.momentum != 0.0) {
    throw ConfigError(fmt::format(
        "optim.momentum = {} does not apply to optim.name = '{}'; its momentum is optim.beta1",
        config.momentum, name));
  }
}

bool updates_in_parts(const std::string& name) {
  return name == "sgd" || name == "adam" || name == "adamw";
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config,
                                          std::vector<Segment> segments) {
  validate_optimizer_config(config);
  if (config.name == "sgd") return std::make_unique<Sgd>(config, std::move(segments));
  if (config.name == "adam") return std::make_unique<Adam>(config, std::move(segments), false);
  if (config.name == "adamw") return std::make_unique<Adam>(config, std::move(segments), true);
  if (config.name == "onebit_adam") {
    return std::make_unique<OneBitAdam>(config, std::move(segments));
  }
  return std::make_unique<Lars>(config, std::move(segments));
}

}  // namespace dtrain::optim
