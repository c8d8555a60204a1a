// im2col / col2im for stride 1 through a zero-padded copy of the image: the fast path of
// nn::Conv2d (every layer of LeNet, the 3x3 layers of a ResNet). Same layout and results as
// im2col.h (cols (C*KH*KW, OH*OW), bitwise equal: both only copy), but:
//   - the image is first copied into scratch (C, H + 2P, W + 2P) with zero borders, so no row
//     copy needs a bounds test: cols[(c, i, j), oh, :] = padded[c, oh + i, j : j + OW];
//   - each row is copied in whole 16-float blocks, and the block past the row's end spills into
//     the next row, which is written after it and overwrites the spill (the last row of cols is
//     copied exactly, so nothing is written past cols). Rows of LeNet are 10 and 28 floats: one or
//     two vector moves instead of a loop with a remainder.
// col2im_padded accumulates into a padded copy in scratch and then writes the interior to image,
// OVERWRITING it (unlike col2im, which adds). With AVX-512 the copy's rows are padded to whole
// 16-float vectors and each one is loaded once per (c, i, oh), takes its KW contributions in
// registers and is stored once (the portable row walk re-reads each row right after a store to
// it, one float off: 510 -> 345 us per 128 images at LeNet's conv2); every pixel still sums its
// contributions in (c, i, j) order, so the bits equal col2im's.
// Cost: C*KH*KW*OH*OW floats moved each way, plus C*(H+2P)*(W+2P) for the padded copy (a single
// memcpy when P = 0).
// With AVX-512, a 3x3 kernel with padding 1 on rows of at most 16 pixels (a ResNet's 14x14 and 7x7
// maps) skips the padded copy: each image row is one masked load, and its three kernel columns are
// that row moved up a lane, as is and moved down a lane (col2im: the adjoint, summed in registers
// in the same (c, i, j) order, so the same bits).
#pragma once

#include <cstdint>

#include "dtrain/tensor/im2col.h"

namespace dtrain::tensor {

// Floats of scratch the two functions below need for geometry g: the padded image (rows rounded up
// to 16 floats) and one 16-float block of slack for the last spill.
std::int64_t im2col_padded_scratch_size(const ConvGeometry& g);

// g.stride must be 1. image (C, H, W) -> cols (C*KH*KW, OH*OW); scratch as sized above.
void im2col_padded(const ConvGeometry& g, const float* image, float* scratch, float* cols);

// g.stride must be 1. cols (C*KH*KW, OH*OW) -> image (C, H, W), overwritten with the adjoint of
// im2col (what col2im adds to a zeroed image).
void col2im_padded(const ConvGeometry& g, const float* cols, float* scratch, float* image);

}  // namespace dtrain::tensor
