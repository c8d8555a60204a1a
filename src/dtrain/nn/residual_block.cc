#include "dtrain/nn/residual_block.h"

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/tensor/elementwise.h"

namespace dtrain::nn {
namespace {

constexpr std::int64_t kElementGrain = 16384;

// fn(begin, end) over contiguous ranges of [0, n), split over the compute pool; fn calls one of
// tensor/elementwise.h's passes on its range.
template <typename Fn>
void for_each_range(std::int64_t n, const Fn& fn) {
  compute_pool().parallel_for(n, kElementGrain, fn);
}

}  // namespace

ResidualBlock::ResidualBlock(std::string name, std::int64_t in_channels, std::int64_t out_channels,
                             std::int64_t stride, InitKind init, float sigma)
    : Layer(std::move(name)),
      in_channels_(in_channels),
      out_channels_(out_channels),
      stride_(stride) {
  const std::string& base = this->name();
  conv1_ = std::make_unique<Conv2d>(base + ".conv1", in_channels, out_channels, 3, stride, 1,
                                    /*bias=*/false, init, sigma);
  bn1_ = std::make_unique<BatchNorm>(base + ".bn1", out_channels);
  // relu(bn1(.)) in one pass each way (the same values as a separate ReLU).
  bn1_->set_fused_relu(true);
  conv2_ = std::make_unique<Conv2d>(base + ".conv2", out_channels, out_channels, 3, 1, 1,
                                    /*bias=*/false, init, sigma);
  bn2_ = std::make_unique<BatchNorm>(base + ".bn2", out_channels);
  if (stride != 1 || in_channels != out_channels) {
    shortcut_conv_ = std::make_unique<Conv2d>(base + ".shortcut_conv", in_channels, out_channels, 1,
                                              stride, 0, /*bias=*/false, init, sigma);
    shortcut_bn_ = std::make_unique<BatchNorm>(base + ".shortcut_bn", out_channels);
  }
}

std::string ResidualBlock::describe() const {
  return fmt::format("ResidualBlock({} -> {}, stride {}, {} shortcut)", in_channels_, out_channels_,
                     stride_, has_projection() ? "1x1 conv" : "identity");
}

tensor::Shape ResidualBlock::output_shape(const tensor::Shape& input) const {
  // The sub-layers' checks name the sub-layer ("block2.conv1") and both shapes.
  const tensor::Shape main =
      bn2_->output_shape(conv2_->output_shape(bn1_->output_shape(conv1_->output_shape(input))));
  const tensor::Shape shortcut =
      has_projection() ? shortcut_bn_->output_shape(shortcut_conv_->output_shape(input)) : input;
  if (main != shortcut) {
    throw ShapeError(fmt::format("layer {} ({}): main branch gives {} but the shortcut gives {}",
                                 name(), describe(), tensor::shape_str(main),
                                 tensor::shape_str(shortcut)));
  }
  return main;
}

void ResidualBlock::declare(ParamStore& store) {
  conv1_->declare(store);
  bn1_->declare(store);
  conv2_->declare(store);
  bn2_->declare(store);
  if (has_projection()) {
    shortcut_conv_->declare(store);
    shortcut_bn_->declare(store);
  }
}

void ResidualBlock::bind(ParamStore& store) {
  conv1_->bind(store);
  bn1_->bind(store);
  conv2_->bind(store);
  bn2_->bind(store);
  if (has_projection()) {
    shortcut_conv_->bind(store);
    shortcut_bn_->bind(store);
  }
}

void ResidualBlock::init(Rng& rng) {
  conv1_->init(rng);
  bn1_->init(rng);
  conv2_->init(rng);
  bn2_->init(rng);
  if (has_projection()) {
    shortcut_conv_->init(rng);
    shortcut_bn_->init(rng);
  }
}

const tensor::Tensor& ResidualBlock::forward(const tensor::Tensor& x, const ForwardContext& ctx) {
  x_ = x;
  // bn1 applies the ReLU itself (set_fused_relu).
  const tensor::Tensor& r = bn1_->forward(conv1_->forward(x, ctx), ctx);
  // The shortcut first, so that bn2 adds it and applies the block's ReLU while it normalizes
  // (forward_add_relu: y = relu(bn2(conv2(r)) + s) in one pass, the bits of tensor::add_relu).
  const tensor::Tensor& shortcut =
      has_projection() ? shortcut_bn_->forward(shortcut_conv_->forward(x, ctx), ctx) : x;
  y_ = bn2_->forward_add_relu(conv2_->forward(r, ctx), shortcut, ctx);
  return y_;
}

const tensor::Tensor& ResidualBlock::backward(const tensor::Tensor& dy, bool need_input_grad) {
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  g_.ensure_shape(y_.shape());
  {
    const float* in = dy.data();
    const float* y = y_.data();
    float* g = g_.data();
    for_each_range(g_.numel(), [&](std::int64_t begin, std::int64_t end) {
      tensor::relu_backward(y + begin, in + begin, g + begin, end - begin);
    });
  }
  // Main branch, last layer first. bn1's backward applies its fused ReLU's mask to dr.
  const tensor::Tensor& dr = conv2_->backward(bn2_->backward(g_, true), true);
  const tensor::Tensor& dz = bn1_->backward(dr, true);
  // The two branches' dx are summed by the last convolution to run, through Conv2d::backward_add
  // (no separate pass over dx, B*C*H*W floats read twice and written once): with the identity
  // shortcut conv1 adds g (the direct dx kernel's starting value at stage 1); with a projection
  // the shortcut's conv adds conv1's dx image by image after its col2im. The shortcut runs last,
  // as before, so that its reads of x follow conv1's while x is still cached. Its parameters need
  // gradients even when x does not.
  if (!has_projection()) {
    if (!need_input_grad) {
      conv1_->backward(dz, false);
      return none_;
    }
    return conv1_->backward_add(dz, g_);
  }
  const tensor::Tensor& dx_main = conv1_->backward(dz, need_input_grad);
  const tensor::Tensor& ds = shortcut_bn_->backward(g_, true);
  if (!need_input_grad) {
    shortcut_conv_->backward(ds, false);
    return none_;
  }
  return shortcut_conv_->backward_add(ds, dx_main);
}

std::vector<Layer*> ResidualBlock::sublayers() {
  std::vector<Layer*> out{conv1_.get(), bn1_.get(), conv2_.get(), bn2_.get()};
  if (shortcut_conv_) {
    out.push_back(shortcut_conv_.get());
    out.push_back(shortcut_bn_.get());
  }
  return out;
}

std::unique_ptr<Layer> ResidualBlock::clone() const {
  // The init arguments do not matter: a replica shares the parameters and is never init()ed.
  auto copy = std::make_unique<ResidualBlock>(name(), in_channels_, out_channels_, stride_);
  // Synchronized batch norms stay synchronized in every slot.
  auto source = const_cast<ResidualBlock*>(this)->sublayers();
  auto target = copy->sublayers();
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (auto* bn = dynamic_cast<BatchNorm*>(source[i])) {
      dynamic_cast<BatchNorm&>(*target[i]).set_reducer(bn->reducer());
    }
  }
  return copy;
}

}  // namespace dtrain::nn
