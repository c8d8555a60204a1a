// TiedOutputHead: the output projection of a GPT, logits = x E^T with no bias, where E (V, d) is
// the token embedding's weight itself (weight tying, Press & Wolf 2017; GPT-2 and the reference's
// `head.weight = tok.weight`).
//
//   forward   logits (N, V) = x (N, d) E^T                        2 N d V FLOPs
//   backward  dE (V, d)    += dlogits^T (N, V)^T x (N, d)         2 N d V FLOPs
//             dx (N, d)     = dlogits (N, V) E (V, d)             2 N d V FLOPs
// with N = B*T: x (B, T, d) -> logits (B, T, V) (any leading dimensions, as Linear).
//
// The head declares no tensor. bind() looks the embedding's parameter up by name in the store
// (ParamStore::find_param) and takes views of its value and its gradient, so the tied weight is one
// ParamStore entry: counted once (the parameter count equals PyTorch's), updated once by the
// optimizer, one gradient range into which the embedding's backward and the head's both add. That
// entry belongs to the embedding's layer (Model::param_layer), which runs backward last, so
// "gradients final after layer i" stays true for data-parallel overlap. A name that is not in the
// store, or a shape other than (V, d), is a ConfigError naming the head and the name.
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class TiedOutputHead : public Layer {
 public:
  // tied_name: the store name of the (vocab, dim) weight to share, e.g. "embed.token_weight".
  TiedOutputHead(std::string name, std::string tied_name, std::int64_t dim, std::int64_t vocab);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // (B, ..., d) -> (B, ..., V).
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void bind(ParamStore& store) override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  const std::string& tied_name() const { return tied_name_; }
  std::vector<std::string> borrowed_params() const override { return {tied_name_}; }
  // The shared weight and gradient (views into the store), valid after bind(): (V, d).
  const tensor::Tensor& weight() const { return weight_; }

 private:
  std::string tied_name_;
  std::int64_t dim_;
  std::int64_t vocab_;
  tensor::Tensor weight_, weight_grad_;  // the embedding's, views into the ParamStore
  tensor::Tensor x_;                     // view of the last input (..., d)
  tensor::Tensor y_;                     // (..., V)
  tensor::Tensor dx_;                    // (..., d)
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
