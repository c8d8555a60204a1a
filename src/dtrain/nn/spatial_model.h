// Spatial parallelism of a convolutional network (seed 003, "spatial parallelism"; Jin, Ginsburg
// and Keutzer, "Spatially Parallel Convolutions", 2018): one model split over the P ranks of a
// group along the image height.
//
// split_spatially(whole, group) builds rank r's model from the unsplit one. Its input is a band
// (B, C, H / P, W): rows [r H / P, (r + 1) H / P) of every image. From the first layer on, as long
// as the layers are ones the split handles, each runs on the band:
//   Conv2d, K - S <= 2p < K (stride 1 with       -> SpatialConv2d (halo exchange: p rows from
//   padding (K - 1) / 2, or the ResNet's 3x3         above, max(0, K - p - S) from below; the
//   stride-2 pad-1 and 1x1 stride-2 pad-0)           output band is rows [r h / S, (r + 1) h / S))
//   BatchNorm                                     -> the same layer, its statistics summed over
//                                                    the group (GroupBatchNormReducer: 2F + 1
//                                                    doubles forward, 2F backward), so it
//                                                    normalizes with the whole images' mean and
//                                                    variance, as the unsplit layer does
//   Activation                                    -> the same layer (element-wise)
//   MaxPool2d / AvgPool2d, window = stride = S    -> the same layer, when every band's rows are a
//                                                    multiple of S: windows then never cross a
//                                                    band boundary
//   ResidualBlock                                 -> a ResidualGroup of its layers' twins (body
//                                                    conv1, bn1, ReLU, conv2, bn2; shortcut
//                                                    projection conv and bn, or the identity;
//                                                    sum and ReLU element-wise on the band), when
//                                                    all of them split
//   ResidualGroup (a layer list's "residual")     -> the same, its body and shortcut split layer
//                                                    by layer, when all of them split
//   AvgPool2d, global                             -> SpatialGlobalAvgPool (band sums allreduced,
//                                                    B C floats): its output is whole on every
//                                                    rank, so the split ends after it, no gather
// Otherwise, at the first other layer (Flatten, Linear, a convolution that changes the height in
// another way, dropout, a residual group with such a layer), a SpatialGather (allgather) puts the
// bands back together and the rest of the model runs unsplit on every rank (same values, same
// gradients, no communication).
// Refused with a ConfigError naming the numbers, before anything trains: an input that is not
// images, H not divisible by P, no convolution before the gather, a band whose rows are not a
// multiple of a strided convolution's stride (P > 1) or of a pool's window, a pool whose window is
// not its stride, a band smaller than a halo.
//
// The split model declares the unsplit model's tensors in the same order with the same names and
// shapes (the gather has none), so both have one flat layout: parameters, gradients, optimizer
// state and checkpoints are interchangeable, every rank holds all of them (replicated). The
// gradients of the split layers, [0, split_params) of the flat buffer, are each rank's share (its
// band's rows) and must be summed over the group; those of the layers after the split are already
// the whole gradient on every rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/batch_norm.h"
#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/model.h"

namespace dtrain::nn {

struct SpatialSplit {
  std::unique_ptr<Model> model;   // built, sample shape (C, H / P, W); parameters not initialized
  std::size_t split_layers = 0;   // layers [0, split_layers) run on bands; then the gather, if any
  std::int64_t split_params = 0;  // floats [0, split_params) of the flat buffers: split layers'
  // One per split convolution, nested ones (in residual blocks) included: what its halo exchange
  // moves per sample, channels x (top or bottom) rows x width floats.
  struct Halo {
    std::size_t layer = 0;  // index in `model` of the layer that holds it (a residual block's)
    std::int64_t channels = 0, top = 0, bottom = 0, width = 0;
    // The convolution is not the first layer of its branch: it always needs its input gradient,
    // so it sends halo gradients backward even when `layer` is the first trainable one.
    bool inner = false;
  };
  std::vector<Halo> halos;
  std::vector<std::int64_t> norm_features;    // F of each split batch norm, in order
  std::vector<std::int64_t> pooled_channels;  // C of each split global average pool (B C floats)
  std::int64_t gathered_per_sample = 0;       // floats of one sample's band at the gather (C h W);
                                              // 0 when there is none (a global pool ends the split)
  std::string gathered_before;                // the first unsplit layer, "flatten (Flatten)"
  // Owned here, installed on the split batch norms; they use the group.
  std::vector<std::unique_ptr<GroupBatchNormReducer>> reducers;
};

// Bytes rank `rank` of `ranks` sends in the halo exchange of `halo` for `samples` samples: forward
// 4 B C W ([rank > 0] bottom + [rank < P - 1] top), backward the same with top and bottom swapped.
double halo_bytes(const SpatialSplit::Halo& halo, int rank, int ranks, std::int64_t samples,
                  bool backward);

// The split described above of `whole` (built) over `group` (which must outlive the result).
SpatialSplit split_spatially(const Model& whole, GroupComm& group);

}  // namespace dtrain::nn

namespace dtrain::nn {

// band (B, C, H / ranks, W) = rows [rank H / ranks, (rank + 1) H / ranks) of every plane of
// images (B, C, H, W); H divisible by ranks.
void take_band(const tensor::Tensor& images, int rank, int ranks, tensor::Tensor& band);

}  // namespace dtrain::nn
