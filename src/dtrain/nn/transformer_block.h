// TransformerBlock: one pre-norm GPT block (GPT-2; the reference model's Block), one Layer so that
// a model stays a sequence that pipeline stages can cut.
//
//   h = x + attn(ln1(x))            CausalSelfAttention "<name>.attn" (qkv, proj)
//   y = h + out(gelu(fc(ln2(h))))   Linear d -> 4d "<name>.fc", GELU (erf), 4d -> d "<name>.out"
// x, h, y: (B, T, d), T <= block; the MLP's hidden activations are (B, T, 4d).
// Sub-layers: "<name>.ln1", "<name>.attn" (with "<name>.attn.qkv", "<name>.attn.proj"),
// "<name>.ln2", "<name>.fc", "<name>.gelu", "<name>.out", so the tensors are "block1.fc.weight" and
// so on, in the order of torch's state_dict for the reference's Block.
// Backward: dh = dy + ln2'(fc'(gelu'(out'(dy)))), dx = dh + ln1'(attn'(dh)) (the residual
// branches add their input gradients to the identity's, inside the LayerNorms' backward passes:
// LayerNorm::backward_plus; dh and dx are ln2's and ln1's input-gradient buffers). Forward, when
// unsplit, h and y are the outputs of proj and out, whose products start from the residual
// (Linear::forward_onto): no pass of their own for the two sums.
// Parameters: 12 d^2 + 13 d. FLOPs per token, forward: 24 d^2 in the four Linears (2 x (3d^2 + d^2
// + 4d^2 + 4d^2)) plus 4 T d in attention (full square); backward twice that. At d = T = 128:
// 0.46 MFLOP forward, 1.38 MFLOP forward and backward per token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/nn/activation.h"
#include "dtrain/nn/causal_self_attention.h"
#include "dtrain/nn/layer.h"
#include "dtrain/nn/layer_norm.h"
#include "dtrain/nn/linear.h"

namespace dtrain::nn {

class TransformerBlock : public Layer {
 public:
  // sigma: the standard deviation of every Linear weight's N(0, sigma^2) init; biases start at 0.
  TransformerBlock(std::string name, std::int64_t dim, std::int64_t heads, std::int64_t block,
                   float sigma = 0.02f);
  // The same block around attention and MLP layers built elsewhere, each split over `split` ranks
  // (tensor parallelism: parallel_transformer_block.h): attn maps (B, T, d) to (B, T, d), fc takes
  // d to its hidden units (4d, or this rank's slice of them), out takes those back to d. The
  // LayerNorms, the GELU and the residual adds are this block's, as in the unsplit one.
  TransformerBlock(std::string name, std::int64_t dim, std::int64_t heads, std::int64_t block,
                   std::unique_ptr<Layer> attn, std::unique_ptr<Layer> fc,
                   std::unique_ptr<Layer> out, int split);

  std::string describe() const override;
  // A replica for another micro-batch slot. A split block clones its attention and MLP layers
  // (each over the same tensor-parallel group) and wraps them in a block of the same split.
  std::unique_ptr<Layer> clone() const override;
  // (B, T, d) with 1 <= T <= block -> (B, T, d).
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  // Sub-layers draw from rng in order: ln1, attn (qkv, proj), ln2, fc, out.
  void init(Rng& rng) override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  // ln1, attn, ln2, fc, gelu, out (attn is itself composite: qkv, proj).
  std::vector<Layer*> sublayers() override;

 private:
  std::int64_t dim_;
  std::int64_t heads_;
  std::int64_t block_;
  int split_ = 1;  // ranks the attention and MLP are split over
  std::unique_ptr<LayerNorm> ln1_, ln2_;
  std::unique_ptr<Layer> attn_, fc_, out_;
  CausalSelfAttention* whole_attention_ = nullptr;  // attn_, when unsplit (clone copies its tile)
  Linear* whole_out_ = nullptr;                     // out_, when unsplit
  std::unique_ptr<Activation> gelu_;
  tensor::Shape out_shape_;  // (B, T, d) of the last forward
  // Split blocks only (unsplit, h and y are proj's and out's outputs):
  tensor::Tensor h_;  // x + attn(ln1(x)), (B, T, d)
  tensor::Tensor y_;  // h + mlp(ln2(h)), (B, T, d)
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
