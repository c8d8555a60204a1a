#include "dtrain/nn/flatten.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtrain/base/error.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using ::testing::HasSubstr;
using testing::random_tensor;

TEST(FlattenTest, CollapsesAllButTheBatchDimension) {
  Flatten flatten("flatten");
  EXPECT_EQ(flatten.output_shape({2, 3, 4, 5}), (tensor::Shape{2, 60}));
  EXPECT_EQ(flatten.output_shape({7, 9}), (tensor::Shape{7, 9}));
  EXPECT_EQ(flatten.output_shape({0, 1, 28, 28}), (tensor::Shape{0, 784}));
}

TEST(FlattenTest, TooFewDimensionsNamesTheLayerAndShape) {
  Flatten flatten("flat0");
  try {
    flatten.output_shape({5});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer flat0 (Flatten)"));
    EXPECT_THAT(e.what(), HasSubstr("got [5]"));
  }
}

TEST(FlattenTest, ForwardAndBackwardAreViewsWithoutCopies) {
  Flatten flatten("flatten");
  const tensor::Tensor x = random_tensor({2, 3, 2, 2}, 1);
  const tensor::Tensor& y = flatten.forward(x, {});
  EXPECT_EQ(y.shape(), (tensor::Shape{2, 12}));
  EXPECT_EQ(y.data(), x.data());
  EXPECT_EQ(y.to_vector(), x.to_vector());
  // Row b of y is sample b of x: element (1, 2, 1, 0) is column 2*4 + 1*2 + 0 = 10 of row 1.
  EXPECT_EQ(y.at({1, 10}), x.at({1, 2, 1, 0}));

  const tensor::Tensor dy = random_tensor({2, 12}, 2);
  const tensor::Tensor& dx = flatten.backward(dy, true);
  EXPECT_EQ(dx.shape(), x.shape());
  EXPECT_EQ(dx.data(), dy.data());
  EXPECT_EQ(flatten.backward(dy, false).numel(), 0);
}

TEST(FlattenTest, FiniteDifferenceGradients) {
  Flatten flatten("flatten");
  ParamStore store;
  testing::bind_single_layer(flatten, store);
  testing::check_layer_gradients(flatten, store, random_tensor({3, 2, 3, 2}, 4));
}

}  // namespace
}  // namespace dtrain::nn
