#include "dtrain/nn/spatial_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/avg_pool2d.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/max_pool2d.h"
#include "dtrain/nn/spatial_conv2d.h"
#include "dtrain/nn/spatial_gather.h"

namespace dtrain::nn {

namespace {

// A pool of window `kernel` and `stride` on bands of `rows` rows: ConfigError unless every window
// lies inside one band.
void check_pool(const Layer& layer, std::int64_t kernel, std::int64_t stride, std::int64_t rows,
                int ranks) {
  if (kernel != stride) {
    throw ConfigError(fmt::format(
        "spatial: layer {} ({}): a pooling window of {} rows with stride {} would cross the band "
        "boundaries; the split handles pools whose window equals their stride",
        layer.name(), layer.describe(), kernel, stride));
  }
  if (rows % stride != 0) {
    throw ConfigError(fmt::format(
        "spatial: layer {} ({}): each of the {} ranks holds {} rows here, not a multiple of the "
        "pool's {}, so its windows would cross band boundaries; use a number of ranks for which "
        "the rows divide",
        layer.name(), layer.describe(), ranks, rows, stride));
  }
}

}  // namespace

SpatialSplit split_spatially(const Model& whole, GroupComm& group) {
  const tensor::Shape& sample = whole.sample_shape();
  const int ranks = group.size();
  if (sample.size() != 3) {
    throw ConfigError(fmt::format(
        "spatial: the model's input {} is not images (C, H, W); spatial parallelism splits "
        "convolutional networks along the image height",
        tensor::shape_str(sample)));
  }
  if (sample[1] % ranks != 0) {
    throw ConfigError(fmt::format(
        "spatial: images of {} rows do not split evenly over {} ranks ({} % {} = {}); use a "
        "number of ranks that divides {}",
        sample[1], ranks, sample[1], ranks, sample[1] % ranks, sample[1]));
  }
  SpatialSplit split;
  split.model = std::make_unique<Model>(tensor::Shape{sample[0], sample[1] / ranks, sample[2]});
  tensor::Shape shape{1, sample[0], sample[1] / ranks, sample[2]};  // one sample's band
  const auto& layers = whole.layers();
  std::size_t i = 0;
  for (; i < layers.size(); ++i) {
    const Layer& layer = *layers[i];
    std::unique_ptr<Layer> part;
    if (const auto* conv = dynamic_cast<const Conv2d*>(&layer)) {
      if (conv->stride() != 1) {
        throw ConfigError(fmt::format(
            "spatial: layer {} ({}) has stride {}; the split handles stride-1 convolutions only",
            conv->name(), conv->describe(), conv->stride()));
      }
      // A convolution without "same" padding changes the height: the split ends before it.
      if (conv->kernel() % 2 == 0 || conv->padding() != (conv->kernel() - 1) / 2) break;
      auto spatial = std::make_unique<SpatialConv2d>(*conv, group);
      if (ranks > 1 && shape[2] < spatial->halo()) {
        throw ConfigError(fmt::format(
            "spatial: layer {} ({}) needs a halo of {} rows, but each of the {} ranks holds only "
            "{} rows there; use fewer ranks or larger images",
            conv->name(), conv->describe(), spatial->halo(), ranks, shape[2]));
      }
      split.halos.push_back({i, conv->in_channels(), spatial->halo(), shape[3]});
      part = std::move(spatial);
    } else if (const auto* norm = dynamic_cast<const BatchNorm*>(&layer)) {
      auto copy = layer.clone();
      split.reducers.push_back(std::make_unique<GroupBatchNormReducer>(group));
      static_cast<BatchNorm&>(*copy).set_reducer(split.reducers.back().get());
      split.norm_features.push_back(norm->features());
      part = std::move(copy);
    } else if (dynamic_cast<const Activation*>(&layer) != nullptr) {
      part = layer.clone();
    } else if (const auto* max_pool = dynamic_cast<const MaxPool2d*>(&layer)) {
      check_pool(layer, max_pool->kernel(), max_pool->stride(), shape[2], ranks);
      part = layer.clone();
    } else if (const auto* avg_pool = dynamic_cast<const AvgPool2d*>(&layer);
               avg_pool != nullptr && !avg_pool->is_global()) {
      check_pool(layer, avg_pool->kernel(), avg_pool->stride(), shape[2], ranks);
      part = layer.clone();
    } else {
      break;
    }
    shape = part->output_shape(shape);
    split.model->add(std::move(part));
  }
  if (split.halos.empty()) {
    const Layer& first = *layers[i < layers.size() ? i : 0];
    throw ConfigError(fmt::format(
        "spatial: no convolution to split: the split takes the leading stride-1 \"same\" "
        "convolutions (odd K, padding (K - 1) / 2), batch norms, activations and aligned pools, "
        "and stops at layer {} ({}); use a convolutional model",
        first.name(), first.describe()));
  }
  split.split_layers = i;
  split.gathered_per_sample = shape[1] * shape[2] * shape[3];
  split.gathered_before =
      i < layers.size() ? fmt::format("{} ({})", layers[i]->name(), layers[i]->describe()) : "";
  split.model->add(std::make_unique<SpatialGather>("spatial_gather", group));
  for (; i < layers.size(); ++i) split.model->add(layers[i]->clone());
  split.model->build();
  // Parameters of the split layers come first in the flat buffer (layers declare in order).
  const ParamStore& store = split.model->store();
  split.split_params = store.num_params();
  for (std::size_t k = 0; k < store.param_entries().size(); ++k) {
    if (split.model->param_layer()[k] > split.split_layers) {
      split.split_params = store.param_entries()[k].offset;
      break;
    }
  }
  return split;
}

}  // namespace dtrain::nn

namespace dtrain::nn {

void take_band(const tensor::Tensor& images, int rank, int ranks, tensor::Tensor& band) {
  DTRAIN_CHECK(images.ndim() == 4 && images.dim(2) % ranks == 0, "images {} in {} bands",
               tensor::shape_str(images.shape()), ranks);
  const std::int64_t planes = images.dim(0) * images.dim(1);
  const std::int64_t h = images.dim(2), w = images.dim(3), rows = h / ranks;
  band.ensure_shape({images.dim(0), images.dim(1), rows, w});
  const float* src = images.data() + rank * rows * w;
  float* dst = band.data();
  for (std::int64_t p = 0; p < planes; ++p) {
    std::copy(src + p * h * w, src + p * h * w + rows * w, dst + p * rows * w);
  }
}

}  // namespace dtrain::nn
