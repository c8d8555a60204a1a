#include "dtrain/tensor/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "dtrain/base/error.h"
#include "dtrain/base/shared_scratch.h"

namespace dtrain::tensor {
namespace {

std::vector<std::int64_t> contiguous_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

std::shared_ptr<float> allocate(std::int64_t numel) {
  constexpr std::size_t kAlignment = 64;
  std::size_t bytes = static_cast<std::size_t>(numel) * sizeof(float);
  bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (bytes == 0) bytes = kAlignment;
  // In a fork server's template and workers, big blocks come from the shared scratch arena
  // (base/shared_scratch.h: pages a forked worker finds populated); elsewhere from the heap.
  if (void* shared = shared_scratch::allocate(bytes)) {
    return std::shared_ptr<float>(static_cast<float*>(shared),
                                  [bytes](float* p) { shared_scratch::release(p, bytes); });
  }
  void* memory = std::aligned_alloc(kAlignment, bytes);
  if (memory == nullptr) throw std::bad_alloc();
  return std::shared_ptr<float>(static_cast<float*>(memory), [](float* p) { std::free(p); });
}

}  // namespace

std::string shape_str(const Shape& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

std::string batch_shape_str(const Shape& shape) {
  if (shape.empty()) return "[] (a scalar)";
  std::string text = "[B";
  for (std::size_t i = 1; i < shape.size(); ++i) text += ", " + std::to_string(shape[i]);
  return text + "]";
}

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw ShapeError(fmt::format("negative dimension in shape {}", shape_str(shape)));
    n *= d;
  }
  return n;
}

Tensor Tensor::empty(const Shape& shape) {
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.numel_ = shape_numel(shape);
  t.storage_ = allocate(t.numel_);
  t.data_ = t.storage_.get();
  return t;
}

Tensor Tensor::zeros(const Shape& shape) {
  Tensor t = empty(shape);
  std::memset(t.data_, 0, static_cast<std::size_t>(t.numel_) * sizeof(float));
  return t;
}

Tensor Tensor::from(const Shape& shape, const std::vector<float>& values) {
  Tensor t = empty(shape);
  if (static_cast<std::int64_t>(values.size()) != t.numel_) {
    throw ShapeError(fmt::format("Tensor::from: shape {} needs {} values, got {}", shape_str(shape),
                                 t.numel_, values.size()));
  }
  std::memcpy(t.data_, values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::view(float* data, const Shape& shape) {
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.numel_ = shape_numel(shape);
  t.data_ = data;
  return t;
}

std::int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int index = i < 0 ? i + n : i;
  if (index < 0 || index >= n) {
    throw ShapeError(fmt::format("dimension {} out of range for shape {}", i, shape_str(shape_)));
  }
  return shape_[static_cast<std::size_t>(index)];
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Tensor Tensor::reshape(const Shape& shape) const {
  if (!is_contiguous()) throw ShapeError("reshape of a non-contiguous tensor; clone() it first");
  if (shape_numel(shape) != numel_) {
    throw ShapeError(fmt::format("cannot reshape {} ({} elements) to {} ({} elements)",
                                 shape_str(shape_), numel_, shape_str(shape), shape_numel(shape)));
  }
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  if (ndim() == 0 || begin < 0 || end < begin || end > shape_[0]) {
    throw ShapeError(
        fmt::format("slice [{}, {}) out of range for shape {}", begin, end, shape_str(shape_)));
  }
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = data_ + begin * strides_[0];
  t.numel_ = shape_numel(t.shape_);
  return t;
}

Tensor Tensor::transpose(int i, int j) const {
  const int n = ndim();
  if (i < 0) i += n;
  if (j < 0) j += n;
  if (i < 0 || j < 0 || i >= n || j >= n) {
    throw ShapeError(
        fmt::format("transpose({}, {}) out of range for shape {}", i, j, shape_str(shape_)));
  }
  Tensor t = *this;
  std::swap(t.shape_[static_cast<std::size_t>(i)], t.shape_[static_cast<std::size_t>(j)]);
  std::swap(t.strides_[static_cast<std::size_t>(i)], t.strides_[static_cast<std::size_t>(j)]);
  return t;
}

std::int64_t Tensor::offset_of(std::initializer_list<std::int64_t> index) const {
  if (static_cast<int>(index.size()) != ndim()) {
    throw ShapeError(fmt::format("index with {} coordinates into a tensor of shape {}",
                                 index.size(), shape_str(shape_)));
  }
  std::int64_t offset = 0;
  std::size_t d = 0;
  for (auto i : index) {
    if (i < 0 || i >= shape_[d]) {
      throw ShapeError(fmt::format("index {} out of range in dimension {} of shape {}", i, d,
                                   shape_str(shape_)));
    }
    offset += i * strides_[d++];
  }
  return offset;
}

float& Tensor::at(std::initializer_list<std::int64_t> index) { return data_[offset_of(index)]; }
float Tensor::at(std::initializer_list<std::int64_t> index) const {
  return data_[offset_of(index)];
}

std::vector<float> Tensor::to_vector() const {
  std::vector<float> out(static_cast<std::size_t>(numel_));
  if (is_contiguous()) {
    if (numel_ > 0) std::memcpy(out.data(), data_, out.size() * sizeof(float));
    return out;
  }
  // General strided walk, odometer style.
  std::vector<std::int64_t> index(shape_.size(), 0);
  for (std::int64_t k = 0; k < numel_; ++k) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < shape_.size(); ++d) offset += index[d] * strides_[d];
    out[static_cast<std::size_t>(k)] = data_[offset];
    for (std::size_t d = shape_.size(); d-- > 0;) {
      if (++index[d] < shape_[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

Tensor Tensor::clone() const { return from(shape_, to_vector()); }

void Tensor::fill(float value) {
  if (!is_contiguous()) throw ShapeError("fill of a non-contiguous tensor");
  for (std::int64_t i = 0; i < numel_; ++i) data_[i] = value;
}

void Tensor::copy_from(const Tensor& source) {
  if (source.numel() != numel_) {
    throw ShapeError(fmt::format("copy_from: {} elements into {} ({} vs {})",
                                 shape_str(source.shape()), shape_str(shape_), source.numel(),
                                 numel_));
  }
  if (!is_contiguous()) throw ShapeError("copy_from into a non-contiguous tensor");
  if (source.is_contiguous()) {
    if (numel_ > 0) {
      std::memmove(data_, source.data(), static_cast<std::size_t>(numel_) * sizeof(float));
    }
  } else {
    const auto values = source.to_vector();
    std::memcpy(data_, values.data(), values.size() * sizeof(float));
  }
}

void Tensor::ensure_shape(const Shape& shape) {
  if (storage_ && shape_ == shape) return;
  *this = empty(shape);
}

}  // namespace dtrain::tensor
