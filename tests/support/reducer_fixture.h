// What the reducer tests (tests/parallel/*_reducer_test.cc) share: a small model to build a
// reducer against, and buckets that are bare ranges of one flat buffer (no tensor entries: a
// reducer needs only the ranges, and odd sizes find the edge cases).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/model_zoo.h"
#include "dtrain/parallel/gradient_buckets.h"

namespace dtrain::testing {

// mlp 12 -> 7 -> 5 -> 3, initialised with seed 1.
inline std::unique_ptr<nn::Model> small_mlp() {
  nn::ModelSpec spec;
  spec.name = "mlp";
  spec.input = {12};
  spec.num_classes = 3;
  spec.hidden = {7, 5};
  auto model = nn::build_model(spec);
  model->init(1);
  return model;
}

// Consecutive buckets of the given sizes over one flat buffer, named bucket0, bucket1, ...
inline std::vector<parallel::GradientBucket> bare_buckets(
    std::initializer_list<std::int64_t> sizes) {
  std::vector<parallel::GradientBucket> buckets;
  std::int64_t offset = 0;
  for (std::int64_t count : sizes) {
    parallel::GradientBucket b;
    b.offset = offset;
    b.count = count;
    b.name = "bucket" + std::to_string(buckets.size());
    buckets.push_back(b);
    offset += count;
  }
  return buckets;
}

// Elements the buckets cover.
inline std::int64_t total(const std::vector<parallel::GradientBucket>& buckets) {
  return buckets.back().offset + buckets.back().count;
}

}  // namespace dtrain::testing
