#include "dtrain/data/dataset.h"

#include <algorithm>
#include <cstring>

#include "dtrain/base/error.h"

namespace dtrain::data {

std::string_view split_name(Split split) { return split == Split::kTrain ? "train" : "test"; }

std::int64_t Dataset::size() const {
  return static_cast<std::int64_t>(labels.size()) / labels_per_sample;
}

tensor::Shape Dataset::sample_shape() const {
  if (images.ndim() < 2) return {};
  const tensor::Shape& shape = images.shape();
  return tensor::Shape(shape.begin() + 1, shape.end());
}

void gather_batch(const Dataset& data, std::span<const std::int64_t> indices, tensor::Tensor& x,
                  std::vector<std::int32_t>& y) {
  DTRAIN_CHECK(data.images.ndim() >= 2 && data.images.dim(0) == data.size(),
               "data set '{}' has images {} but {} labels", data.name,
               tensor::shape_str(data.images.shape()), data.labels.size());
  const std::int64_t batch = static_cast<std::int64_t>(indices.size());
  const std::int64_t sample_numel = tensor::shape_numel(data.sample_shape());
  const std::int64_t per_sample = data.labels_per_sample;
  tensor::Shape shape = data.images.shape();
  shape[0] = batch;
  x.ensure_shape(shape);
  y.resize(indices.size() * static_cast<std::size_t>(per_sample));
  const float* source = data.images.data();
  float* target = x.data();
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t index = indices[static_cast<std::size_t>(b)];
    DTRAIN_CHECK(index >= 0 && index < data.size(),
                 "batch position {} asks for sample {} of data set '{}', which has {} samples", b,
                 index, data.name, data.size());
    std::memcpy(target + b * sample_numel, source + index * sample_numel,
                static_cast<std::size_t>(sample_numel) * sizeof(float));
    std::copy_n(data.labels.begin() + index * per_sample, per_sample, y.begin() + b * per_sample);
  }
}

}  // namespace dtrain::data
