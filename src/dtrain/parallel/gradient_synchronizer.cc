#include "dtrain/parallel/gradient_synchronizer.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/parallel/reducers/allreduce_reducer.h"

namespace dtrain::parallel {

GradientSynchronizer::GradientSynchronizer(comm::Communicator& comm, nn::Model& model,
                                           DataParallelOptions options)
    : comm_(comm),
      model_(model),
      options_(std::move(options)),
      buckets_(make_gradient_buckets(model.store().param_entries(), model.param_layer(),
                                     options_.fusion_bytes)) {
  works_.reserve(buckets_.size());
  timings_.resize(buckets_.size());
  comm::CollectiveOptions collective;
  collective.algorithm = options_.algorithm;
  collective.check_header = options_.check_headers;
  barrier_options_ = collective;
  barrier_options_.algorithm.clear();  // a barrier has one algorithm
  const ReducerFactory& make = options_.reducer ? options_.reducer : allreduce_reducer();
  reducer_ = make(ReducerContext{comm, model, buckets_, collective});
  if (!reducer_->per_bucket() && options_.overlap) {
    throw InternalError(fmt::format(
        "GradientSynchronizer: the {} reducer exchanges nothing per bucket, so it cannot overlap "
        "with backward; turn overlap off",
        reducer_->collective()));
  }
}

void GradientSynchronizer::reduce(std::size_t bucket, bool async) {
  const GradientBucket& b = buckets_[bucket];
  float* grads = model_.store().grads() + b.offset;
  if (async) {
    works_.push_back(reducer_->reduce_async(b, grads));
  } else {
    reducer_->reduce(b, grads);
  }
}

std::pair<BucketTiming::Clock::time_point, BucketTiming::Clock::time_point>
GradientSynchronizer::gather_parameters() {
  const auto start = BucketTiming::Clock::now();
  reducer_->gather_parameters();
  return {start, BucketTiming::Clock::now()};
}

void GradientSynchronizer::begin_step() {
  if (launched_ != 0 || !works_.empty()) {
    throw InternalError("GradientSynchronizer::begin_step before the last step's finish()");
  }
}

void GradientSynchronizer::on_layer_done(std::size_t layer) {
  if (!options_.overlap) return;
  // Buckets are in backward order, so the ready ones are a prefix of those not launched yet.
  while (launched_ < buckets_.size() && buckets_[launched_].ready_after_layer >= layer) {
    launch(launched_);
  }
}

void GradientSynchronizer::launch(std::size_t bucket) {
  timings_[bucket].launched = BucketTiming::Clock::now();
  reduce(bucket, /*async=*/true);
  ++launched_;
}

void GradientSynchronizer::wait_for(std::size_t bucket) {
  const comm::Work& work = works_[bucket];
  const GradientBucket& b = buckets_[bucket];
  // The communicator's own deadline ends a stuck allreduce with an error naming the missing ranks;
  // waiting a little longer than it guarantees we see that error rather than a bare timeout here.
  const auto hard_limit = comm_.options().timeout + std::chrono::seconds(5);
  auto waited = std::chrono::milliseconds(0);
  for (;;) {
    const auto slice = std::min(options_.stall_warning, hard_limit - waited);
    try {
      work.wait(slice);
      return;
    } catch (const comm::CommTimeoutError& e) {
      if (work.done()) {  // the allreduce itself failed
        throw comm::CommError(fmt::format("rank {}: {} of gradient bucket {} ({}): {}",
                                          comm_.rank(), gradient_collective(), bucket, b.name,
                                          e.what()));
      }
      waited += slice;
      if (waited >= hard_limit) throw;
      log::warn(
          "stall: rank {} has waited {:.1f} s for the {} of gradient bucket {} ({}, {} "
          "bytes); another rank is late or stopped (the communicator fails the step after {} s)",
          comm_.rank(), static_cast<double>(waited.count()) / 1e3, gradient_collective(), bucket,
          b.name, b.count * 4, static_cast<double>(comm_.options().timeout.count()) / 1e3);
    } catch (const Error& e) {
      throw comm::CommError(fmt::format("rank {}: {} of gradient bucket {} ({}): {}", comm_.rank(),
                                        gradient_collective(), bucket, b.name, e.what()));
    }
  }
}

void GradientSynchronizer::finish() {
  if (!reducer_->per_bucket()) {
    // Every rank has finished backward once the barrier returns, and its messages order those
    // gradient writes before the reducer's update reads them.
    const auto start = BucketTiming::Clock::now();
    try {
      comm_.barrier(barrier_options_);
    } catch (const Error& e) {
      throw comm::CommError(fmt::format("rank {}: barrier before the {} of the gradients: {}",
                                        comm_.rank(), reducer_->collective(), e.what()));
    }
    const auto end = BucketTiming::Clock::now();
    for (auto& t : timings_) t.launched = t.started = t.finished = end;
    wait_seconds_ = std::chrono::duration<double>(end - start).count();
    return;
  }
  if (!options_.overlap) {
    // Without overlap the buckets are reduced here, on the calling thread, one after another:
    // no hand-off to the communication thread and back, which on a machine with no spare core
    // costs a scheduler wake-up per bucket (docs/PARALLEL.md).
    const auto start = BucketTiming::Clock::now();
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
      const GradientBucket& b = buckets_[i];
      timings_[i].launched = timings_[i].started = BucketTiming::Clock::now();
      try {
        reduce(i, /*async=*/false);
      } catch (const Error& e) {
        throw comm::CommError(fmt::format("rank {}: {} of gradient bucket {} ({}): {}",
                                          comm_.rank(), gradient_collective(), i, b.name,
                                          e.what()));
      }
      timings_[i].finished = BucketTiming::Clock::now();
    }
    wait_seconds_ = std::chrono::duration<double>(BucketTiming::Clock::now() - start).count();
    return;
  }
  while (launched_ < buckets_.size()) launch(launched_);
  const auto start = BucketTiming::Clock::now();
  try {
    for (std::size_t i = 0; i < works_.size(); ++i) wait_for(i);
  } catch (...) {
    // Leave no Work pointing into a step that is being abandoned half-way.
    for (auto& work : works_) {
      try {
        work.wait(comm_.options().timeout + std::chrono::seconds(5));
      } catch (...) {
      }
    }
    works_.clear();
    launched_ = 0;
    throw;
  }
  const auto end = BucketTiming::Clock::now();
  wait_seconds_ = std::chrono::duration<double>(end - start).count();
  BucketTiming::Clock::time_point previous_end{};
  for (std::size_t i = 0; i < works_.size(); ++i) {
    timings_[i].finished = works_[i].finished_at();
    timings_[i].started = std::max(timings_[i].launched, previous_end);
    previous_end = timings_[i].finished;
  }
  works_.clear();
  launched_ = 0;
}

}  // namespace dtrain::parallel
