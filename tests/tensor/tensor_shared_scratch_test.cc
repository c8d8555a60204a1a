// Tensors in a fork server's shared scratch arena (base/shared_scratch.h): with the arena
// installed, storage of at least kMinBytes comes from it and goes back to it when the last copy
// of the tensor goes; smaller tensors stay on the heap; without it, nothing changes.
#include <gtest/gtest.h>

#include "dtrain/base/shared_scratch.h"
#include "dtrain/tensor/tensor.h"

namespace dtrain::tensor {
namespace {

TEST(TensorSharedScratch, BigTensorsComeFromTheArenaAndGoBackToIt) {
  const Shape big = {256, 128};  // 128 KiB
  EXPECT_FALSE(shared_scratch::owns(Tensor::empty(big).data()));
  ASSERT_TRUE(shared_scratch::install(std::size_t{64} << 20));
  const float* first = nullptr;
  {
    Tensor t = Tensor::zeros(big);
    first = t.data();
    EXPECT_TRUE(shared_scratch::owns(first));
    EXPECT_EQ(t.at({255, 127}), 0.0f);
    Tensor copy = t;  // shares the storage
    t = Tensor();
    EXPECT_EQ(copy.data(), first);
  }
  // Given back: the next tensor of that size takes the same block.
  EXPECT_EQ(Tensor::empty(big).data(), first);
  EXPECT_FALSE(shared_scratch::owns(Tensor::empty({16, 16}).data()));  // 1 KiB: the heap
  shared_scratch::uninstall_for_test();
}

}  // namespace
}  // namespace dtrain::tensor
