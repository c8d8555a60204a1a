#include "dtrain/nn/spatial_model.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/avg_pool2d.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/max_pool2d.h"
#include "dtrain/nn/residual_block.h"
#include "dtrain/nn/residual_group.h"
#include "dtrain/nn/spatial_conv2d.h"
#include "dtrain/nn/spatial_gather.h"
#include "dtrain/nn/spatial_global_avg_pool.h"

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

// Builds the band twins of layers, recording what they exchange in `split`.
class Splitter {
 public:
  Splitter(GroupComm& group, SpatialSplit& split) : group_(group), split_(split) {}

  // The twin of `layer` (index `index` of the model) on bands of one sample's `shape`
  // (1, C, h, W), `shape` advanced to its output; nullptr, with nothing recorded, when the split
  // ends before it. `first`: the layer is the first of its branch (its input gradient may be
  // skipped). Throws the refusals.
  std::unique_ptr<Layer> split(const Layer& layer, std::size_t index, tensor::Shape& shape,
                               bool first) {
    const int ranks = group_.size();
    std::unique_ptr<Layer> part;
    if (const auto* conv = dynamic_cast<const Conv2d*>(&layer)) {
      // A convolution whose output rows are not the input's / S ends the split (LeNet-5's conv2).
      if (!SpatialConv2d::splits_along_rows(*conv)) return nullptr;
      // Bands whose rows are not a multiple of the stride would give output rows that straddle
      // two ranks: the split ends before this convolution (before the residual block that holds
      // it), as at any layer it does not take (the ResNet on 28 x 28 over 2 ranks: stage 3).
      const std::int64_t rows = shape[2], stride = conv->stride();
      if (rows % stride != 0) return nullptr;
      auto spatial = std::make_unique<SpatialConv2d>(*conv, group_);
      const std::int64_t halo = std::max(spatial->halo_top(), spatial->halo_bottom());
      if (ranks > 1 && rows < halo) {
        throw ConfigError(fmt::format(
            "spatial: layer {} ({}) needs a halo of {} rows, but each of the {} ranks holds only "
            "{} rows there; use fewer ranks or larger images",
            conv->name(), conv->describe(), halo, ranks, rows));
      }
      split_.halos.push_back({index, conv->in_channels(), spatial->halo_top(),
                              spatial->halo_bottom(), shape[3], !first});
      part = std::move(spatial);
    } else if (const auto* norm = dynamic_cast<const BatchNorm*>(&layer)) {
      auto copy = layer.clone();
      split_.reducers.push_back(std::make_unique<GroupBatchNormReducer>(group_));
      static_cast<BatchNorm&>(*copy).set_reducer(split_.reducers.back().get());
      split_.norm_features.push_back(norm->features());
      part = std::move(copy);
    } else if (dynamic_cast<const Activation*>(&layer) != nullptr) {
      part = layer.clone();
    } else if (const auto* max_pool = dynamic_cast<const MaxPool2d*>(&layer)) {
      check_pool(layer, max_pool->kernel(), max_pool->stride(), shape[2], ranks);
      part = layer.clone();
    } else if (const auto* avg_pool = dynamic_cast<const AvgPool2d*>(&layer)) {
      if (avg_pool->is_global()) {
        split_.pooled_channels.push_back(shape[1]);
        part = std::make_unique<SpatialGlobalAvgPool>(layer.name(), group_);
      } else {
        check_pool(layer, avg_pool->kernel(), avg_pool->stride(), shape[2], ranks);
        part = layer.clone();
      }
    } else if (const auto* block = dynamic_cast<const ResidualBlock*>(&layer)) {
      return split_block(*block, index, shape, first);
    } else if (const auto* group = dynamic_cast<const ResidualGroup*>(&layer)) {
      return split_group(*group, index, shape, first);
    } else {
      return nullptr;
    }
    shape = part->output_shape(shape);
    return part;
  }

 private:
  // What split_ has recorded, to forget a residual block whose layers do not all split.
  struct Mark {
    std::size_t halos, norms, pools, reducers;
  };
  Mark mark() const {
    return {split_.halos.size(), split_.norm_features.size(), split_.pooled_channels.size(),
            split_.reducers.size()};
  }
  void roll_back(const Mark& m) {
    split_.halos.resize(m.halos);
    split_.norm_features.resize(m.norms);
    split_.pooled_channels.resize(m.pools);
    split_.reducers.resize(m.reducers);
  }

  // The twins of `layers`, in order, from `shape`; false when one does not split.
  bool split_chain(const std::vector<const Layer*>& layers, std::size_t index, tensor::Shape& shape,
                   bool first, std::vector<std::unique_ptr<Layer>>& out) {
    for (std::size_t k = 0; k < layers.size(); ++k) {
      // A global pool inside a branch would make the band whole: not a band any more.
      if (const auto* pool = dynamic_cast<const AvgPool2d*>(layers[k]);
          pool != nullptr && pool->is_global()) {
        return false;
      }
      auto part = split(*layers[k], index, shape, first && k == 0);
      if (!part) return false;
      out.push_back(std::move(part));
    }
    return true;
  }

  // A residual group of the twins of `body` and `shortcut` (empty: identity), or nullptr.
  std::unique_ptr<Layer> split_branches(const std::string& name,
                                        const std::vector<const Layer*>& body,
                                        const std::vector<const Layer*>& shortcut,
                                        std::unique_ptr<Activation> act, std::size_t index,
                                        tensor::Shape& shape, bool first) {
    const Mark before = mark();
    std::vector<std::unique_ptr<Layer>> body_parts, shortcut_parts;
    tensor::Shape body_shape = shape, shortcut_shape = shape;
    if (!split_chain(body, index, body_shape, first, body_parts) ||
        !split_chain(shortcut, index, shortcut_shape, first, shortcut_parts)) {
      body_parts.clear();
      shortcut_parts.clear();
      roll_back(before);
      return nullptr;
    }
    auto part = std::make_unique<ResidualGroup>(name, std::move(body_parts),
                                                std::move(shortcut_parts), std::move(act));
    shape = part->output_shape(shape);
    return part;
  }

  std::unique_ptr<Layer> split_block(const ResidualBlock& block, std::size_t index,
                                     tensor::Shape& shape, bool first) {
    // conv1, bn1, conv2, bn2, then the projection's conv and bn (residual_block.h).
    const std::vector<Layer*> sub = const_cast<ResidualBlock&>(block).sublayers();
    // bn1 carries the block's first ReLU itself where the block fused it
    // (BatchNorm::set_fused_relu), and its clone keeps it: no second ReLU then.
    const Activation relu(block.name() + ".relu", ActivationKind::kRelu);
    const auto* bn1 = dynamic_cast<const BatchNorm*>(sub[1]);
    std::vector<const Layer*> body{sub[0], sub[1]};
    if (bn1 == nullptr || !bn1->fused_relu()) body.push_back(&relu);
    body.push_back(sub[2]);
    body.push_back(sub[3]);
    std::vector<const Layer*> shortcut;
    if (block.has_projection()) shortcut = {sub[4], sub[5]};
    return split_branches(
        block.name(), body, shortcut,
        std::make_unique<Activation>(block.name() + ".act", ActivationKind::kRelu), index, shape,
        first);
  }

  std::unique_ptr<Layer> split_group(const ResidualGroup& group, std::size_t index,
                                     tensor::Shape& shape, bool first) {
    std::vector<const Layer*> body, shortcut;
    for (const auto& layer : group.body()) body.push_back(layer.get());
    for (const auto& layer : group.shortcut()) shortcut.push_back(layer.get());
    std::unique_ptr<Activation> act;
    if (const Activation* a = group.activation()) {
      act = std::make_unique<Activation>(a->name(), a->kind(), a->alpha());
    }
    return split_branches(group.name(), body, shortcut, std::move(act), index, shape, first);
  }

  GroupComm& group_;
  SpatialSplit& split_;
};

}  // namespace

double halo_bytes(const SpatialSplit::Halo& halo, int rank, int ranks, std::int64_t samples,
                  bool backward) {
  const std::int64_t up = backward ? halo.top : halo.bottom;  // rows sent to rank - 1
  const std::int64_t down = backward ? halo.bottom : halo.top;
  const std::int64_t rows = (rank > 0 ? up : 0) + (rank + 1 < ranks ? down : 0);
  return 4.0 * static_cast<double>(samples * halo.channels * rows * halo.width);
}

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
  Splitter splitter(group, split);
  std::size_t i = 0;
  bool whole_output = false;  // a global pool made the band whole: no gather
  for (; i < layers.size() && !whole_output; ++i) {
    std::unique_ptr<Layer> part = splitter.split(*layers[i], i, shape, /*first=*/true);
    if (!part) break;
    whole_output = dynamic_cast<const SpatialGlobalAvgPool*>(part.get()) != nullptr;
    split.model->add(std::move(part));
  }
  if (split.halos.empty()) {
    const Layer& first = *layers[i < layers.size() ? i : 0];
    throw ConfigError(fmt::format(
        "spatial: no convolution to split: the split takes the leading convolutions whose output "
        "has H / S rows (stride 1 with padding (K - 1) / 2, or strided with K - S <= 2 x padding "
        "< K), batch norms, activations, aligned pools and residual blocks of those, and stops at "
        "layer {} ({}); use a convolutional model",
        first.name(), first.describe()));
  }
  split.split_layers = i;
  std::size_t head = i;  // index of the first unsplit layer in split.model
  if (!whole_output) {
    split.gathered_per_sample = shape[1] * shape[2] * shape[3];
    split.gathered_before =
        i < layers.size() ? fmt::format("{} ({})", layers[i]->name(), layers[i]->describe()) : "";
    split.model->add(std::make_unique<SpatialGather>("spatial_gather", group));
    ++head;
  }
  for (; i < layers.size(); ++i) split.model->add(layers[i]->clone());
  split.model->build();
  // Parameters of the split layers come first in the flat buffer (layers declare in order).
  const ParamStore& store = split.model->store();
  split.split_params = store.num_params();
  for (std::size_t k = 0; k < store.param_entries().size(); ++k) {
    if (split.model->param_layer()[k] >= head) {
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
