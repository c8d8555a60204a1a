// Spatial parallelism (nn/spatial_model.h over parallel::CommGroup): a small convolutional network
// with halos of 1 and 2 rows, batch norm, max pooling and a fully connected head, split over P
// ranks along the image height, gives the unsplit model's output, input gradient (each rank its
// band's rows), parameter gradients (the split layers' summed over the ranks) and batch-norm
// running statistics, to 1e-5 relative, for P = 2, 3, 4; the halo bytes each rank sends equal
// 4 B C p W per convolution and neighbour, forward and backward; a split that cannot be done is
// one ConfigError naming the numbers.
#include "dtrain/nn/spatial_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/batch_norm.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/flatten.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/max_pool2d.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/parallel/comm_group.h"
#include "grad_check.h"
#include "spatial_bands.h"

namespace dtrain::parallel {
namespace {

using dtrain::testing::band;
using dtrain::testing::random_tensor;
using dtrain::testing::relative;

constexpr std::int64_t kBatch = 3, kChannels = 2, kWidth = 7, kClasses = 3;

// conv1 3x3 (halo 1) -> bn -> relu -> 2x2 max pool -> conv2 5x5 (halo 2, no bias) -> tanh ->
// flatten -> linear. `pool` sets the pool's window and stride.
std::unique_ptr<nn::Model> small_cnn(std::int64_t height, std::int64_t pool = 2) {
  auto model = std::make_unique<nn::Model>(tensor::Shape{kChannels, height, kWidth});
  model->add(std::make_unique<nn::Conv2d>("conv1", kChannels, 4, 3, 1, 1));
  model->add(std::make_unique<nn::BatchNorm>("bn1", 4));
  model->add(std::make_unique<nn::Activation>("relu1", nn::ActivationKind::kRelu));
  model->add(std::make_unique<nn::MaxPool2d>("pool1", pool, pool));
  model->add(std::make_unique<nn::Conv2d>("conv2", 4, 5, 5, 1, 2, /*bias=*/false));
  model->add(std::make_unique<nn::Activation>("tanh2", nn::ActivationKind::kTanh));
  model->add(std::make_unique<nn::Flatten>("flatten"));
  const std::int64_t pooled_h = height / pool, pooled_w = kWidth / pool;
  model->add(std::make_unique<nn::Linear>("fc", 5 * pooled_h * pooled_w, kClasses));
  model->build();
  model->init(5);
  return model;
}

struct SplitCase {
  std::int64_t height;
  int ranks;
};

class SpatialModelSweep : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SpatialModelSweep, BandsGiveTheUnsplitModelsOutputAndGradients) {
  const auto [height, ranks] = GetParam();
  const tensor::Tensor x = random_tensor({kBatch, kChannels, height, kWidth}, 21, 1.5f);
  const tensor::Tensor dy = random_tensor({kBatch, kClasses}, 22);
  const nn::ForwardContext ctx{nn::Mode::kTrain, 0, 0};

  auto whole = small_cnn(height);
  const std::size_t layers = whole->layers().size();
  const std::vector<float> initial_buffers(
      whole->store().buffers(), whole->store().buffers() + whole->store().num_buffer_elements());
  const tensor::Tensor y_whole = whole->forward(x, ctx).clone();
  whole->store().zero_grads();
  const tensor::Tensor dx_whole =
      whole->backward_range(dy, {0, layers}, 0, /*input_grad=*/true).clone();
  const nn::ParamStore& reference = whole->store();

  comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
    CommGroup group(comm);
    nn::SpatialSplit split = nn::split_spatially(*whole, group);
    nn::Model& model = *split.model;
    nn::ParamStore& store = model.store();
    ASSERT_EQ(store.num_params(), reference.num_params());
    ASSERT_EQ(split.split_layers, 6u);  // the gather comes before flatten
    EXPECT_EQ(split.halos.size(), 2u);
    std::copy(reference.params(), reference.params() + reference.num_params(), store.params());
    // The batch norm's running statistics as they were before the reference's forward.
    std::copy(initial_buffers.begin(), initial_buffers.end(), store.buffers());
    const std::int64_t rows = height / ranks;
    const tensor::Tensor x_band = band(x, comm.rank() * rows, rows);

    const comm::OpStats sent_before = comm.stats().get("send");
    const tensor::Tensor y = model.forward(x_band, ctx).clone();
    store.zero_grads();
    const tensor::Tensor dx =
        model.backward_range(dy, {0, model.layers().size()}, 0, /*input_grad=*/true).clone();
    const std::int64_t sent = comm.stats().get("send").bytes_sent - sent_before.bytes_sent;
    comm.allreduce(store.grads(), split.split_params, DType::kF32, comm::ReduceOp::kSum);

    EXPECT_LE(relative(y.data(), y_whole.data(), y.numel()), 1e-5)
        << "output, rank " << comm.rank();
    const tensor::Tensor dx_expected = band(dx_whole, comm.rank() * rows, rows);
    EXPECT_LE(relative(dx.data(), dx_expected.data(), dx.numel()), 1e-5)
        << "input gradient, rank " << comm.rank();
    // A weight gradient is a float sum over B x H x W positions, here split in bands and added by
    // the allreduce: its terms nearly cancel for a bias after batch norm, so the sum's relative
    // rounding is a few times float's 6e-8 x their count (1.5e-5 measured at -O1). 1e-4 still
    // fails for a halo row missing or counted twice (about 1e-1).
    for (const nn::ParamEntry& entry : reference.param_entries()) {
      EXPECT_LE(
          relative(store.grads() + entry.offset, reference.grads() + entry.offset, entry.numel),
          1e-4)
          << entry.name << ", rank " << comm.rank();
    }
    EXPECT_LE(relative(store.buffers(), reference.buffers(), reference.num_buffer_elements()), 1e-6)
        << "running statistics, rank " << comm.rank();
    // Bytes: each convolution sends 4 B C p W per neighbour forward, and again backward (the
    // input gradient is needed by every layer here: input_grad).
    const int neighbours = (comm.rank() > 0) + (comm.rank() + 1 < ranks);
    std::int64_t expected = 0;
    for (const auto& halo : split.halos) {
      EXPECT_EQ(halo.top, halo.bottom);  // stride 1, "same": p rows each side
      expected += 2 * neighbours * 4 * kBatch * halo.channels * halo.top * halo.width;
    }
    EXPECT_EQ(sent, expected) << "rank " << comm.rank();
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, SpatialModelSweep,
                         ::testing::Values(SplitCase{12, 2}, SplitCase{12, 3}, SplitCase{16, 4}),
                         [](const ::testing::TestParamInfo<SplitCase>& param_info) {
                           return "H" + std::to_string(param_info.param.height) + "_P" +
                                  std::to_string(param_info.param.ranks);
                         });

// A group of `size` ranks that never communicates: the refusals come before any exchange.
class SilentGroup final : public nn::GroupComm {
 public:
  explicit SilentGroup(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void allreduce_sum(double*, std::int64_t) override {}
  void allreduce_sum(float*, std::int64_t) override {}
  void allgather(const float*, float*, std::int64_t) override {}
  void exchange(int, const float*, std::int64_t, float*, std::int64_t) override {}

 private:
  int size_;
};

std::string refusal(const nn::Model& model, int ranks) {
  SilentGroup group(ranks);
  try {
    nn::split_spatially(model, group);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(SpatialModelTest, SplitsThatCannotBeDoneAreRefusedWithTheNumbers) {
  // Rows that do not divide: 12 over 5 ranks.
  EXPECT_NE(refusal(*small_cnn(12), 5).find("12 rows do not split evenly over 5 ranks"),
            std::string::npos)
      << refusal(*small_cnn(12), 5);
  // 16 rows over 8 ranks: 2 rows each, the pool's window 2 fits, but conv2's halo of 2 rows
  // meets bands of 1 row after it.
  EXPECT_NE(refusal(*small_cnn(16), 8).find("needs a halo of 2 rows"), std::string::npos)
      << refusal(*small_cnn(16), 8);
  // 12 rows over 4 ranks: 3 rows each, not a multiple of the 2x2 pool.
  EXPECT_NE(refusal(*small_cnn(12), 4).find("holds 3 rows here, not a multiple of the pool's 2"),
            std::string::npos)
      << refusal(*small_cnn(12), 4);
  // A model without convolutions: the MLP.
  nn::ModelSpec mlp;
  mlp.name = "mlp";
  EXPECT_NE(refusal(*nn::build_model(mlp), 2).find("no convolution to split"), std::string::npos)
      << refusal(*nn::build_model(mlp), 2);
  // A strided convolution on bands of 3 rows (its output rows would straddle the bands) ends the
  // split; as the model's first layer, nothing is left to split.
  nn::Model strided(tensor::Shape{1, 6, 8});
  strided.add(std::make_unique<nn::Conv2d>("conv", 1, 2, 3, 2, 1));
  strided.add(std::make_unique<nn::Flatten>("flatten"));
  strided.build();
  EXPECT_NE(refusal(strided, 2).find("no convolution to split"), std::string::npos)
      << refusal(strided, 2);
  EXPECT_NE(refusal(strided, 2).find("stops at layer conv ("), std::string::npos)
      << refusal(strided, 2);
  // A 4x4 stride-2 convolution, padding 1, needs 1 row from each side: on bands of 2 rows (16
  // rows over 8 ranks) it splits, but a 5x5 stride-1 one after it needs 2 rows of bands of 1.
  nn::Model deep(tensor::Shape{1, 16, 8});
  deep.add(std::make_unique<nn::Conv2d>("conv1", 1, 2, 4, 2, 1));
  deep.add(std::make_unique<nn::Conv2d>("conv2", 2, 2, 5, 1, 2));
  deep.add(std::make_unique<nn::Flatten>("flatten"));
  deep.build();
  EXPECT_NE(refusal(deep, 8).find("layer conv2 (Conv2d(2 -> 2, 5x5, stride 1, pad 2)) needs a halo "
                                  "of 2 rows, but each of the 8 ranks holds only 1 rows there"),
            std::string::npos)
      << refusal(deep, 8);
  // LeNet-5's 5x5 valid convolution comes second: the split ends before it, and a model whose
  // first layer is such a convolution has nothing to split.
  nn::Model valid(tensor::Shape{1, 8, 8});
  valid.add(std::make_unique<nn::Conv2d>("conv", 1, 2, 3, 1, 0));
  valid.add(std::make_unique<nn::Flatten>("flatten"));
  valid.build();
  EXPECT_NE(refusal(valid, 2).find("no convolution to split"), std::string::npos)
      << refusal(valid, 2);
}

}  // namespace
}  // namespace dtrain::parallel
