#include "dtrain/train/strategies/hybrid/data_axis.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/parallel/optimizer_shards.h"
#include "dtrain/parallel/reducers/zero1_reducer.h"

namespace dtrain::train {

DataAxis::DataAxis(comm::Communicator& data, nn::Model& model, std::vector<optim::Segment> segments,
                   comm::CollectiveOptions options, bool zero1)
    : data_(data), model_(model), segments_(std::move(segments)), options_(std::move(options)) {
  // Contiguous runs of the segments, each one "bucket" (one collective): with its store entries,
  // so that a ZeRO-1 block is cut at tensor borders (shard_segments).
  const auto& entries = model_.store().param_entries();
  for (const optim::Segment& segment : segments_) {
    if (segment.numel == 0) continue;
    if (!ranges_.empty() && ranges_.back().offset + ranges_.back().count == segment.offset) {
      ranges_.back().count += segment.numel;
    } else {
      parallel::GradientBucket range;
      range.offset = segment.offset;
      range.count = segment.numel;
      ranges_.push_back(range);
    }
  }
  for (auto& range : ranges_) {
    range.first_entry = entries.size();
    range.end_entry = 0;
    for (std::size_t e = 0; e < entries.size(); ++e) {
      if (entries[e].offset >= range.offset && entries[e].offset < range.offset + range.count) {
        range.first_entry = std::min(range.first_entry, e);
        range.end_entry = e + 1;
      }
    }
    range.name = fmt::format("[{}, {})", range.offset, range.offset + range.count);
  }
  if (zero1) {
    reducer_ =
        parallel::zero1_reducer()(parallel::ReducerContext{data_, model_, ranges_, options_});
  }
}

DataAxis::~DataAxis() = default;

std::vector<optim::Segment> DataAxis::update_segments() const {
  return reducer_ ? reducer_->update_segments() : segments_;
}

std::int64_t DataAxis::numel() const {
  std::int64_t n = 0;
  for (const auto& range : ranges_) n += range.count;
  return n;
}

double DataAxis::predicted_step_bytes() const {
  const double d = data_.size();
  return 2.0 * (d - 1.0) / d * 4.0 * static_cast<double>(numel());
}

void DataAxis::step(optim::Optimizer& optimizer, float* params, float* grads, double lr) {
  if (data_.size() == 1) {
    optimizer.step(params, grads, lr);
    return;
  }
  for (const auto& range : ranges_) {
    try {
      if (reducer_) {
        reducer_->reduce(range, grads + range.offset);
      } else {
        data_.allreduce(grads + range.offset, range.count, DType::kF32, comm::ReduceOp::kSum,
                        options_);
      }
    } catch (const Error& e) {
      throw comm::CommError(fmt::format("rank {} of the data group: summing gradients {}: {}",
                                        data_.rank(), range.name, e.what()));
    }
  }
  optimizer.step(params, grads, lr);
  if (reducer_) reducer_->gather_parameters();
}

std::vector<optim::StateTensor> DataAxis::whole_state(const optim::Optimizer& optimizer) const {
  std::vector<optim::StateTensor> state = optimizer.state();
  if (!reducer_) return state;
  // Each rank's block placed in a zero vector of the store's length; the sum over the group is
  // the whole state (every element non-zero on one rank at most), packed as segments_.
  const std::int64_t total = model_.store().num_params();
  const std::vector<optim::Segment> mine = reducer_->update_segments();
  for (auto& tensor : state) {
    std::vector<float> full = parallel::expand_state(mine, tensor.values, total);
    data_.allreduce(full.data(), total, DType::kF32, comm::ReduceOp::kSum, options_);
    tensor.values = parallel::pack_state(segments_, full);
  }
  return state;
}

std::vector<optim::StateTensor> DataAxis::own_state(
    const std::vector<optim::StateTensor>& whole) const {
  if (!reducer_) return whole;
  const std::int64_t total = model_.store().num_params();
  const std::vector<optim::Segment> mine = reducer_->update_segments();
  std::vector<optim::StateTensor> state;
  for (const auto& tensor : whole) {
    std::int64_t expected = 0;
    for (const auto& segment : segments_) expected += segment.numel;
    if (static_cast<std::int64_t>(tensor.values.size()) != expected) {
      throw CheckpointError(
          fmt::format("optimizer state '{}' holds {} values, this rank's stage or shard has {}",
                      tensor.name, tensor.values.size(), expected));
    }
    state.push_back(
        {tensor.name,
         parallel::pack_state(mine, parallel::expand_state(segments_, tensor.values, total))});
  }
  return state;
}

DataAxisOptimizer::DataAxisOptimizer(DataAxis& axis, optim::Optimizer& inner)
    : optim::Optimizer(axis.segments()), axis_(axis), inner_(inner) {}

void DataAxisOptimizer::step(float* params, const float* grads, double lr) {
  // Optimizer::step takes the gradients const because update rules only read them; here they are
  // the inner strategy's own gradient buffer, which the data group sums in place.
  axis_.step(inner_, params, const_cast<float*>(grads), lr);
}

std::vector<optim::StateTensor> DataAxisOptimizer::state() const {
  return axis_.whole_state(inner_);
}

void DataAxisOptimizer::load_state(const std::vector<optim::StateTensor>& state,
                                   std::int64_t steps) {
  inner_.load_state(axis_.own_state(state), steps);
}

}  // namespace dtrain::train
