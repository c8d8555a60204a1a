// A model of your own, trained by dtrain on two workers: the program a C++ user starts from
// (docs/LIBRARY.md).
//
// make_model builds a small convolutional network from dtrain's layers, none of the model zoo's:
//   conv 3x3, 8 channels, padding 1   (B, C, H, W)          -> (B, 8, H, W)
//   ReLU, max pool 2x2                                      -> (B, 8, H/2, W/2)
//   flatten, linear to 64             (B, 8 (H/2) (W/2))    -> (B, 64)
//   LayerNorm, GELU, linear           (B, 64)               -> (B, classes)   logits
// The Trainer calls it once per rank and initialises every replica from train.seed, so both
// workers start from the same parameters. run_training starts the two workers as threads, and the
// data_parallel strategy averages their gradients every step (ring allreduce): each step is one
// global batch of 128, 64 samples per worker.
//
// Usage: custom_model RUN_DIR [FASHION_MNIST_DIR]
// Trains 2 epochs of 12,800 Fashion-MNIST images (200 steps; about a second on two cores), or of a
// synthetic set when the data set's folder is absent, and writes RUN_DIR as `dtrain train` does
// (metrics.jsonl, summary.json, ...).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "dtrain/base/error.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/flatten.h"
#include "dtrain/nn/layer_norm.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/max_pool2d.h"
#include "dtrain/nn/model.h"
#include "dtrain/train/launch.h"

using namespace dtrain;

// sample: one input's shape (C, H, W); classes: the data set's label count.
std::unique_ptr<nn::Model> make_model(const tensor::Shape& sample, std::int64_t classes) {
  const std::int64_t channels = 8;
  const std::int64_t pooled = channels * (sample[1] / 2) * (sample[2] / 2);
  auto model = std::make_unique<nn::Model>(sample);
  model->add(std::make_unique<nn::Conv2d>("conv", sample[0], channels, /*kernel=*/3, /*stride=*/1,
                                          /*padding=*/1));
  model->add(std::make_unique<nn::Activation>("relu", nn::ActivationKind::kRelu));
  model->add(std::make_unique<nn::MaxPool2d>("pool", /*kernel=*/2, /*stride=*/2));
  model->add(std::make_unique<nn::Flatten>("flatten"));
  model->add(std::make_unique<nn::Linear>("fc1", pooled, 64));
  model->add(std::make_unique<nn::LayerNorm>("norm", 64));
  model->add(std::make_unique<nn::Activation>("gelu", nn::ActivationKind::kGelu));
  model->add(std::make_unique<nn::Linear>("fc2", 64, classes, nn::InitKind::kXavier));
  model->build();  // checks that each layer's input fits the previous one's output
  return model;
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s RUN_DIR [FASHION_MNIST_DIR]\n", argv[0]);
    return 2;
  }
  const std::string data_dir = argc == 3 ? argv[2] : "/usr/share/datasets/fashion-mnist";
  try {
    train::Config config;  // every key at its default (docs/CONFIG.md); set what differs
    if (std::filesystem::exists(data_dir)) {
      config.data.dataset = "fashion-mnist";
      config.data.path = data_dir;
      config.data.limit_train = 12800;  // 100 steps per epoch
      config.data.limit_test = 2000;
    } else {
      config.data.dataset = "synthetic";  // 10 Gaussian classes of (1, 8, 8) samples
      config.data.synthetic_samples = 12800;
    }
    config.train.epochs = 2;
    config.train.batch_size = 128;  // the global batch, split over the workers
    config.train.log_every = 20;
    config.optim.name = "sgd";
    config.optim.lr = 0.1;
    config.optim.momentum = 0.9;
    config.parallel.strategy = "data_parallel";
    config.parallel.workers = 2;  // two ranks, as threads of this process

    train::TrainerOptions options;
    options.run_dir = argv[1];
    options.make_model = make_model;
    const train::RunSummary summary = train::run_training(config, options);
    std::printf(
        "custom model (%lld parameters) on %s, 2 workers: %lld steps, train loss %.4f, test "
        "loss %.4f, test accuracy %.2f%%\n",
        static_cast<long long>(summary.parameters), summary.dataset.c_str(),
        static_cast<long long>(summary.steps), summary.final_train_loss, summary.final_test_loss,
        100.0 * summary.final_test_accuracy);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
