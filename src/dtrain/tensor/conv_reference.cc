#include "dtrain/tensor/conv_reference.h"

#include <vector>

namespace dtrain::tensor {

void conv2d_forward_naive(const ConvGeometry& g, std::int64_t batch, std::int64_t filters,
                          const float* x, const float* w, const float* bias, float* y) {
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t f = 0; f < filters; ++f)
      for (std::int64_t oh = 0; oh < oh_count; ++oh)
        for (std::int64_t ow = 0; ow < ow_count; ++ow) {
          double sum = bias != nullptr ? static_cast<double>(bias[f]) : 0.0;
          for (std::int64_t c = 0; c < g.channels; ++c)
            for (std::int64_t i = 0; i < g.kernel_h; ++i)
              for (std::int64_t j = 0; j < g.kernel_w; ++j) {
                const std::int64_t yy = oh * g.stride - g.padding + i;
                const std::int64_t xx = ow * g.stride - g.padding + j;
                if (yy < 0 || yy >= g.height || xx < 0 || xx >= g.width) continue;
                sum += static_cast<double>(
                           w[((f * g.channels + c) * g.kernel_h + i) * g.kernel_w + j]) *
                       x[((b * g.channels + c) * g.height + yy) * g.width + xx];
              }
          y[((b * filters + f) * oh_count + oh) * ow_count + ow] = static_cast<float>(sum);
        }
}

void conv2d_backward_naive(const ConvGeometry& g, std::int64_t batch, std::int64_t filters,
                           const float* x, const float* w, const float* dy, float* dx, float* dw,
                           float* db) {
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  const std::int64_t x_numel = batch * g.channels * g.height * g.width;
  const std::int64_t w_numel = filters * g.col_rows();
  std::vector<double> dx_sum(static_cast<std::size_t>(x_numel), 0.0);
  std::vector<double> dw_sum(static_cast<std::size_t>(w_numel), 0.0);
  std::vector<double> db_sum(static_cast<std::size_t>(filters), 0.0);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t f = 0; f < filters; ++f)
      for (std::int64_t oh = 0; oh < oh_count; ++oh)
        for (std::int64_t ow = 0; ow < ow_count; ++ow) {
          const double grad = dy[((b * filters + f) * oh_count + oh) * ow_count + ow];
          db_sum[static_cast<std::size_t>(f)] += grad;
          for (std::int64_t c = 0; c < g.channels; ++c)
            for (std::int64_t i = 0; i < g.kernel_h; ++i)
              for (std::int64_t j = 0; j < g.kernel_w; ++j) {
                const std::int64_t yy = oh * g.stride - g.padding + i;
                const std::int64_t xx = ow * g.stride - g.padding + j;
                if (yy < 0 || yy >= g.height || xx < 0 || xx >= g.width) continue;
                const auto wi = static_cast<std::size_t>(
                    ((f * g.channels + c) * g.kernel_h + i) * g.kernel_w + j);
                const auto xi =
                    static_cast<std::size_t>(((b * g.channels + c) * g.height + yy) * g.width + xx);
                dw_sum[wi] += grad * x[xi];
                dx_sum[xi] += grad * w[wi];
              }
        }
  if (dx != nullptr) {
    for (std::int64_t i = 0; i < x_numel; ++i) {
      dx[i] = static_cast<float>(dx_sum[static_cast<std::size_t>(i)]);
    }
  }
  for (std::int64_t i = 0; i < w_numel; ++i) {
    dw[i] += static_cast<float>(dw_sum[static_cast<std::size_t>(i)]);
  }
  if (db != nullptr) {
    for (std::int64_t f = 0; f < filters; ++f) {
      db[f] += static_cast<float>(db_sum[static_cast<std::size_t>(f)]);
    }
  }
}

}  // namespace dtrain::tensor
