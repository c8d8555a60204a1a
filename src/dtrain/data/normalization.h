// Pixel normalisation: u8 pixels to f32 inputs of mean ~0 and standard deviation ~1 per channel.
//
// x_norm = (x / 255 - mean[c]) / std[c], with mean and std those of the training set's pixels
// scaled to [0, 1]. Centred, unit-scale inputs keep the first layer's pre-activations in the range
// its initialisation assumes, so the same learning rate works across data sets.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::data {

struct Normalization {
  std::vector<float> mean;  // one per channel, of x / 255
  std::vector<float> std;   // one per channel, > 0
};

// The training-set statistics of a known data set: "fashion-mnist" 0.2860/0.3530, "mnist"
// 0.1307/0.3081, "cifar10" (0.4914, 0.4822, 0.4465)/(0.2470, 0.2435, 0.2616). Any other name is a
// ConfigError listing these.
Normalization standard_normalization(const std::string& dataset_name);

// Throws ConfigError unless `norm` has `channels` means and stds, all finite, stds > 0; `where`
// names the data set or file for the message.
void check_normalization(const Normalization& norm, std::int64_t channels, std::string_view where);

// Decodes `samples` records of u8 pixels into f32 (N, C, P), P = plane:
//   out[n, c, p] = (records[n * record_stride + c * P + p] / 255 - mean[c]) / std[c].
// record_stride >= C * P lets records carry extra bytes in front (CIFAR-10's label byte: pass
// records + 1 and stride 3073). One pass through a 256-entry table per channel, so it costs one
// load and one store per pixel (about 50 ms for Fashion-MNIST's 47 M training pixels). It runs on
// the calling thread: readers may be called from several rank threads at once, and the shared
// compute pool is not reentrant.
void decode_pixels(const std::uint8_t* records, std::int64_t record_stride, std::int64_t samples,
                   std::int64_t channels, std::int64_t plane, const Normalization& norm,
                   float* out);

}  // namespace dtrain::data
