// Spatial parallelism of a convolutional network (seed 003, "spatial parallelism"; Jin, Ginsburg
// and Keutzer, "Spatially Parallel Convolutions", 2018): one model split over the P ranks of a
// group along the image height.
//
// split_spatially(whole, group) builds rank r's model from the unsplit one. Its input is a band
// (B, C, H / P, W): rows [r H / P, (r + 1) H / P) of every image. From the first layer on, as long
// as the layers are ones the split handles, each runs on the band:
//   Conv2d, stride 1, odd K, padding (K - 1) / 2  -> SpatialConv2d (halo exchange, K - 1 rows)
//   BatchNorm                                     -> the same layer, its statistics summed over
//                                                    the group (GroupBatchNormReducer: 2F + 1
//                                                    doubles forward, 2F backward), so it
//                                                    normalizes with the whole images' mean and
//                                                    variance, as the unsplit layer does
//   Activation                                    -> the same layer (element-wise)
//   MaxPool2d / AvgPool2d, window = stride = S    -> the same layer, when every band's rows are a
//                                                    multiple of S: windows then never cross a
//                                                    band boundary
// At the first other layer (Flatten, Linear, a residual block, a convolution that changes the
// height, a global pool, dropout) a SpatialGather (allgather) puts the bands back together and the
// rest of the model runs unsplit on every rank (same values, same gradients, no communication).
// Refused with a ConfigError naming the numbers, before anything trains: an input that is not
// images, H not divisible by P, no convolution before the gather, a strided convolution, a pool
// whose window is not its stride or does not divide a band's rows, a band smaller than a halo.
//
// The split model declares the unsplit model's tensors in the same order with the same names and
// shapes (the gather has none), so both have one flat layout: parameters, gradients, optimizer
// state and checkpoints are interchangeable, every rank holds all of them (replicated). The
// gradients of the split layers, [0, split_params) of the flat buffer, are each rank's share (its
// band's rows) and must be summed over the group; those of the layers after the gather are already
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
  std::size_t split_layers = 0;   // layers [0, split_layers) run on bands; then the gather
  std::int64_t split_params = 0;  // floats [0, split_params) of the flat buffers: split layers'
  // One per split convolution: what its halo exchange moves (per neighbour and sample,
  // channels x rows x width floats each way).
  struct Halo {
    std::size_t layer = 0;  // index in `model`
    std::int64_t channels = 0, rows = 0, width = 0;
  };
  std::vector<Halo> halos;
  std::vector<std::int64_t> norm_features;  // F of each split batch norm, in order
  std::int64_t gathered_per_sample = 0;     // floats of one sample's band at the gather (C h W)
  std::string gathered_before;              // the first unsplit layer, "flatten (Flatten)"
  // Owned here, installed on the split batch norms; they use the group.
  std::vector<std::unique_ptr<GroupBatchNormReducer>> reducers;
};

// The split described above of `whole` (built) over `group` (which must outlive the result).
SpatialSplit split_spatially(const Model& whole, GroupComm& group);

}  // namespace dtrain::nn

namespace dtrain::nn {

// band (B, C, H / ranks, W) = rows [rank H / ranks, (rank + 1) H / ranks) of every plane of
// images (B, C, H, W); H divisible by ranks.
void take_band(const tensor::Tensor& images, int rank, int ranks, tensor::Tensor& band);

}  // namespace dtrain::nn
