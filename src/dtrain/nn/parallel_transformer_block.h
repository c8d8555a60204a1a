// ParallelTransformerBlock: TransformerBlock (transformer_block.h) split over a tensor-parallel
// group of P ranks as Megatron-LM splits it:
//
//   h = x + attn(ln1(x))          ParallelCausalSelfAttention: heads split, qkv column-parallel,
//                                 proj row-parallel
//   y = h + out(gelu(fc(ln2(h)))) fc ColumnParallelLinear d -> 4d (rank r: hidden units
//                                 [r 4d/P, (r+1) 4d/P)), GELU on its slice, out RowParallelLinear
//                                 4d -> d
// x, h, y and the LayerNorms are whole and replicated: ln1, ln2 compute the same on every rank and
// receive the same gradient (the f allreduce makes it whole), so their parameters' gradients are
// bitwise equal on every rank and their replicas stay equal without any exchange.
// Communication per block and step: forward two allreduces (attn's g, the MLP's g), backward two
// (the MLP's f, attn's f), each of B T d floats: 4 x 2 (P-1)/P x 4 B T d bytes sent per rank.
// Tensor names are TransformerBlock's ("block1.fc.weight", ...), with this rank's shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/nn/activation.h"
#include "dtrain/nn/column_parallel_linear.h"
#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/layer.h"
#include "dtrain/nn/layer_norm.h"
#include "dtrain/nn/parallel_causal_self_attention.h"
#include "dtrain/nn/row_parallel_linear.h"

namespace dtrain::nn {

class ParallelTransformerBlock : public Layer {
 public:
  ParallelTransformerBlock(std::string name, std::int64_t dim, std::int64_t heads,
                           std::int64_t block, GroupComm& group);

  std::string describe() const override;
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;
  // ln1, attn, ln2, fc, gelu, out.
  std::vector<Layer*> sublayers() override;

 private:
  std::int64_t dim_;
  std::int64_t heads_;
  std::int64_t block_;
  int parts_;
  std::unique_ptr<LayerNorm> ln1_, ln2_;
  std::unique_ptr<ParallelCausalSelfAttention> attn_;
  std::unique_ptr<ColumnParallelLinear> fc_;
  std::unique_ptr<Activation> gelu_;
  std::unique_ptr<RowParallelLinear> out_;
  tensor::Tensor h_, y_, dh_, dx_;  // (B, T, d)
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
