// im2col / col2im for strides S > 1 through phase planes: the fast path of nn::Conv2d's strided
// layers (a ResNet's 3x3 and 1x1 stride-2 layers entering stages 2 and 3). Same layout and results
// as im2col.h (cols (C*KH*KW, OH*OW); bitwise equal: im2col only copies, and col2im_strided adds
// each pixel's contributions in the same (c, i, j, oh) order, starting from zero).
//
// The image, zero-padded to (C, H + 2P, W + 2P), is split by column phase into S planes
// (S, C, H + 2P, WQ), WQ = ceil((W + 2P) / S):
//   phases[p, c, y, q] = padded[c, y, q*S + p]     (0 beyond the padded row)
// so that the strided gather of im2col becomes a contiguous copy:
//   cols[(c, i, j), oh, 0:OW] = phases[j mod S, c, oh*S + i, j/S : j/S + OW].
// Each cols row is then one short copy (OW = 14 or 7 floats in a ResNet), a masked vector move
// with AVX-512, where im2col's strided loop read one float at a time. col2im_strided adds each
// dcols row into the phase planes with the same moves and interleaves the planes back into the
// image, OVERWRITING it (im2col.h's col2im adds to it, so its callers zeroed it first).
// Cost: C*KH*KW*OH*OW floats moved each way, plus C*(H + 2P)*(W + 2P) for the phase planes.
// A 1x1 kernel with stride 2 and no padding (a ResNet's projection shortcut) skips the phase planes
// with AVX-512: its cols are the even pixels of the even rows, gathered (and, for col2im, put back
// between zeros) straight from and to the image, C*OH*OW floats read and C*H*W written.
#pragma once

#include <cstdint>

#include "dtrain/tensor/im2col.h"

namespace dtrain::tensor {

// Floats of scratch the two functions below need for geometry g: the phase planes.
std::int64_t im2col_strided_scratch_size(const ConvGeometry& g);

// g.stride >= 1 (meant for > 1). image (C, H, W) -> cols (C*KH*KW, OH*OW).
void im2col_strided(const ConvGeometry& g, const float* image, float* scratch, float* cols);

// cols (C*KH*KW, OH*OW) -> image (C, H, W), overwritten with the adjoint of im2col.
void col2im_strided(const ConvGeometry& g, const float* cols, float* scratch, float* image);

}  // namespace dtrain::tensor
