// Direct convolution with AVX-512 for layers whose output rows are 17 to 32 pixels wide and whose
// stride is 1: the first layer of LeNet (1 -> 6 channels, 5x5, 28x28 padded by 2) and CIFAR-sized
// first layers, and the first stage of a ResNet (16 -> 16, 3x3, 28x28). There im2col + GEMM is a
// poor fit: the product (F, C*K*K) x (C*K*K, OH*OW) has tiny M and K (6 and 25), so OpenBLAS runs
// it far below peak after im2col has copied the image 25 times, and the weight gradient (F, Q) x
// (Q, R) goes through its packing path.
//
// Both kernels work on one image. The weight gradient and the forward of most shapes read shifted
// copies in scratch (C, KW, H + 2P, 32): for each kernel column j, every padded row shifted left by
// j and cut to OW, built straight from the image with masked loads (zeros where the padding is), so
// that an output row is two aligned vectors, the second masked to OW - 16 lanes. The forward of a
// "same" convolution (OH = H, OW = W) with filters in groups of 8 (ResNet's 3x3 layers, padding 1)
// reads the image itself instead, as flat planes of H*W pixels, 32 at a time across row ends, with
// one load mask per tap and vector for the padding (no copy; 2% of lanes idle at 28x28, not 12.5%):
//   forward      y[f, oh, :] = bias[f] + sum_{c,i,j} w[f, c, i, j] * pad[c, oh + i, j : j + OW]
//                8 filters at a time when F is a multiple of 8 (ResNet), else 6 (LeNet): 16 or
//                12 accumulators, one broadcast weight and two loads per 16 or 12 FMAs; cost
//                2*F*C*K*K*OH*OW FLOPs, no cols written. nn::Conv2d also runs it for the input
//                gradient of a stride-1 layer (dy convolved with the flipped kernel).
//   weight grad  lanes[(f, c, i, j), l] += sum_{oh, ow = l mod 16} dy[f, oh, ow] * pad[c, oh + i,
//                ow + j]; three filters x five shifts j at a time (15 accumulators) for kernels 5
//                wide, four filters x three shifts (12) for kernels 3 wide; the same FLOPs. The 16
//                lanes of each of the F*C*K*K sums are kept apart across images and folded into
//                the gradient once by conv_direct_reduce_lanes, in a fixed order, so a result
//                depends only on which images a caller hands to which lanes buffer (and not on the
//                grouping of filters and shifts: each sum adds the same terms in the same order).
// The reference twin is tensor/conv_reference.h; the tests compare the two.
#pragma once

#include <cstdint>

#include "dtrain/tensor/im2col.h"

namespace dtrain::tensor {

// Lanes per accumulated weight-gradient sum.
inline constexpr std::int64_t kConvDirectLanes = 16;

// True when this build has AVX-512 and g has stride 1 and 16 < OW <= 32; the kernels below may
// only be called then.
bool conv_direct_supported(const ConvGeometry& g);

// Floats of scratch the kernels need: the shifted copies.
std::int64_t conv_direct_scratch_size(const ConvGeometry& g);

// image (C, H, W), weight (F, C, KH, KW), bias (F) or null -> y (F, OH, OW), overwritten; with
// addend (F, OH, OW) not null, y = addend + bias + the convolution, the addend being the sums'
// starting value (nn::Conv2d adds a residual block's identity-shortcut gradient into dx so).
void conv_direct_forward(const ConvGeometry& g, std::int64_t filters, const float* weight,
                         const float* bias, const float* image, float* scratch, float* y,
                         const float* addend = nullptr);

// image (C, H, W), dy (F, OH, OW) -> lanes (F*C*KH*KW, kConvDirectLanes), ADDED to.
void conv_direct_weight_grad(const ConvGeometry& g, std::int64_t filters, const float* dy,
                             const float* image, float* scratch, float* lanes);

// dw[k] += the sum of lanes[k, :] for k < count, by halving (l + 8, then l + 4, ...): a fixed
// order.
void conv_direct_reduce_lanes(std::int64_t count, const float* lanes, float* dw);

}  // namespace dtrain::tensor
