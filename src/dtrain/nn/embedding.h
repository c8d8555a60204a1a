// Embedding: token and learned position embeddings, the first layer of a GPT.
//
//   x (B, T) token ids as floats (the data layer stores every sample as f32)
//   y[b, t, :] = token_weight[x[b, t], :] + position_weight[t, :]          y (B, T, d)
// token_weight (V, d) and position_weight (block, d), as torch.nn.Embedding(V, d) and
// torch.nn.Embedding(block, d); T may be anything from 1 to block (generation feeds shorter
// windows). Both are 2-D weights: they decay, as the reference recipe's "dim >= 2" rule says, and
// start as N(0, sigma^2) (sigma 0.02 in GPT-2 and the reference).
// The token table is also the output head's weight (tied_output_head.h binds it by name,
// token_weight_name()); both add into its one gradient range.
//
// Backward: dtoken[x[b, t]] += dy[b, t], dposition[t] += dy[b, t], rows in order (so the result
// does not depend on the thread count; B*T*d additions, no FLOP worth splitting). Ids are not
// differentiable: asked for dL/dx, it returns zeros of x's shape (the derivative where it exists),
// and a model skips it (Embedding is the first layer).
// A token id that is not an integer in [0, V) is a DataError naming the sample, the position and
// the value, before anything is written.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class Embedding : public Layer {
 public:
  Embedding(std::string name, std::int64_t vocab, std::int64_t block, std::int64_t dim,
            float sigma = 0.02f);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // (B, T) with 1 <= T <= block -> (B, T, d).
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  void init(Rng& rng) override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  std::int64_t vocab() const { return vocab_; }
  std::int64_t block() const { return block_; }
  std::int64_t dim() const { return dim_; }
  // "<name>.token_weight": what a tied output head binds to.
  std::string token_weight_name() const { return name() + ".token_weight"; }
  // Views into the store, valid after bind(): (V, d) and (block, d).
  const tensor::Tensor& token_weight() const { return token_weight_; }
  const tensor::Tensor& position_weight() const { return position_weight_; }

 private:
  std::int64_t vocab_;
  std::int64_t block_;
  std::int64_t dim_;
  float sigma_;
  int token_index_ = -1;
  int position_index_ = -1;
  tensor::Tensor token_weight_, position_weight_, token_grad_, position_grad_;  // store views
  std::vector<std::int32_t> ids_;  // (B*T) the last forward's ids, for backward
  std::int64_t batch_ = 0, length_ = 0;
  tensor::Tensor y_;   // (B, T, d)
  tensor::Tensor dx_;  // (B, T) zeros
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
