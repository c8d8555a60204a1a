// Tensor: a shape and strides over shared f32 storage.
//
// The engine computes in f32. A Tensor either owns its storage (Tensor::zeros, Tensor::empty) or
// views memory owned elsewhere (Tensor::view), such as a slice of the flat parameter buffer of
// nn::ParamStore. Copies of a Tensor share storage; clone() copies the elements. Kernels take
// contiguous row-major tensors; views made by reshape/slice of a contiguous tensor stay contiguous.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::tensor {

using Shape = std::vector<std::int64_t>;

// "[128, 1, 28, 28]"
std::string shape_str(const Shape& shape);
std::int64_t shape_numel(const Shape& shape);
// "[B, 1, 28, 28]": a batched shape with dimension 0 written as B, as error messages about a
// layer's input show it (the batch size is not what is wrong).
std::string batch_shape_str(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Owning, 64-byte aligned, zero-filled / uninitialised.
  static Tensor zeros(const Shape& shape);
  static Tensor empty(const Shape& shape);
  // Owning copy of `values`, which must have shape_numel(shape) elements.
  static Tensor from(const Shape& shape, const std::vector<float>& values);
  // Non-owning view of `data` (the caller keeps it alive), contiguous row-major.
  static Tensor view(float* data, const Shape& shape);

  float* data() { return data_; }
  const float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  const std::vector<std::int64_t>& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // Size of dimension i; negative i counts from the back.
  std::int64_t dim(int i) const;
  std::int64_t numel() const { return numel_; }
  bool is_contiguous() const;

  // A view with another shape and the same elements (contiguous tensors only).
  Tensor reshape(const Shape& shape) const;
  // A view of rows [begin, end) of dimension 0.
  Tensor slice(std::int64_t begin, std::int64_t end) const;
  // A view with dimensions i and j swapped (not contiguous).
  Tensor transpose(int i, int j) const;

  // Element access by multi-index, honouring strides (for tests and naive kernels).
  float& at(std::initializer_list<std::int64_t> index);
  float at(std::initializer_list<std::int64_t> index) const;

  Tensor clone() const;  // owning contiguous copy
  void fill(float value);
  void zero() { fill(0.0f); }
  // Copies the elements of `source`, which must have the same numel (shapes may differ).
  void copy_from(const Tensor& source);
  std::vector<float> to_vector() const;

  // Makes this an owning tensor of `shape` unless it already has exactly that shape; used by layers
  // to keep their activation buffers across steps without reallocating.
  void ensure_shape(const Shape& shape);

 private:
  std::int64_t offset_of(std::initializer_list<std::int64_t> index) const;

  std::shared_ptr<float> storage_;  // null for views
  float* data_ = nullptr;
  Shape shape_;
  std::vector<std::int64_t> strides_;
  std::int64_t numel_ = 0;
};

}  // namespace dtrain::tensor
