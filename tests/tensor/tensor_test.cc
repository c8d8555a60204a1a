#include "dtrain/tensor/tensor.h"

#include <gtest/gtest.h>

#include "dtrain/base/error.h"

namespace dtrain::tensor {
namespace {

TEST(Tensor, ZerosHasShapeStridesAndZeros) {
  Tensor t = Tensor::zeros({2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides(), (std::vector<std::int64_t>{12, 4, 1}));
  EXPECT_EQ(t.dim(-1), 4);
  for (float v : t.to_vector()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u);
}

TEST(Tensor, ReshapeAndSliceAreViews) {
  Tensor t = Tensor::from({2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor r = t.reshape({3, 2});
  r.at({2, 1}) = 50;
  EXPECT_EQ(t.at({1, 2}), 50);
  Tensor s = t.slice(1, 2);
  EXPECT_EQ(s.shape(), (Shape{1, 3}));
  EXPECT_EQ(s.at({0, 0}), 3);
  EXPECT_THROW(t.reshape({4, 2}), ShapeError);
  EXPECT_THROW(t.slice(1, 3), ShapeError);
}

TEST(Tensor, TransposeIsAStridedView) {
  Tensor t = Tensor::from({2, 3}, {0, 1, 2, 3, 4, 5});
  Tensor tt = t.transpose(0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.to_vector(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(tt.clone().at({2, 1}), 5);
}

TEST(Tensor, ViewSharesCallerMemory) {
  std::vector<float> memory(6, 1.0f);
  Tensor v = Tensor::view(memory.data(), {3, 2});
  v.fill(2.0f);
  EXPECT_EQ(memory[5], 2.0f);
}

TEST(Tensor, ErrorsNameTheShapes) {
  Tensor t = Tensor::zeros({2, 3});
  try {
    t.reshape({7});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos);
  }
  EXPECT_THROW(t.at({2, 0}), ShapeError);
  EXPECT_THROW(Tensor::from({2}, {1, 2, 3}), ShapeError);
}

TEST(Tensor, EnsureShapeKeepsOrReallocates) {
  Tensor t;
  t.ensure_shape({4, 4});
  float* first = t.data();
  t.ensure_shape({4, 4});
  EXPECT_EQ(t.data(), first);
  t.ensure_shape({2, 4});
  EXPECT_EQ(t.shape(), (Shape{2, 4}));
}

}  // namespace
}  // namespace dtrain::tensor

namespace dtrain::tensor {
namespace {

TEST(Tensor, BatchShapeStrWritesTheBatchAsB) {
  EXPECT_EQ(batch_shape_str({128, 1, 28, 28}), "[B, 1, 28, 28]");
  EXPECT_EQ(batch_shape_str({7}), "[B]");
  EXPECT_EQ(batch_shape_str({}), "[] (a scalar)");
}

}  // namespace
}  // namespace dtrain::tensor
