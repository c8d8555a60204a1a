#include "dtrain/compress/powersgd.h"

#include <algorithm>
#include <cmath>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"
#include "dtrain/tensor/gemm.h"

namespace dtrain::compress {
namespace {

constexpr std::uint64_t kPowerSgdStream = 0x706f77657273ULL;  // "powers"

}  // namespace

LowRankShape LowRankShape::of(std::int64_t n) {
  if (n <= 0) return {};
  auto cols = static_cast<std::int64_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  while (cols * cols < n) ++cols;  // the double's rounding, either way
  while ((cols - 1) * (cols - 1) >= n) --cols;
  return {(n + cols - 1) / cols, cols};
}

PowerSgd::PowerSgd(std::int64_t n, int rank, std::uint64_t seed)
    : PowerSgd(LowRankShape::of(n), rank, seed) {
  n_ = n;  // the near-square shape may pad past n
}

PowerSgd::PowerSgd(LowRankShape shape, int rank, std::uint64_t seed)
    : n_(shape.rows * shape.cols), shape_(shape), rank_(rank) {
  DTRAIN_CHECK(rank >= 1 && rank <= std::min(shape_.rows, shape_.cols),
               "PowerSGD rank {} for a {} x {} matrix", rank, shape_.rows, shape_.cols);
  matrix_.assign(static_cast<std::size_t>(shape_.rows * shape_.cols), 0.0f);
  p_.assign(static_cast<std::size_t>(p_count()), 0.0f);
  q_.resize(static_cast<std::size_t>(q_count()));
  Rng rng(seed, rng_stream(kPowerSgdStream));
  for (float& v : q_) v = rng.normal();
}

bool PowerSgd::compresses() const { return rank_ * (shape_.rows + shape_.cols) < n_; }

void PowerSgd::compute_p(const float* x) {
  // decode() used the matrix as scratch: the padding past n must be zero again.
  std::fill(std::copy(x, x + n_, matrix_.begin()), matrix_.end(), 0.0f);
  tensor::gemm(tensor::Trans::kNo, tensor::Trans::kNo, shape_.rows, rank_, shape_.cols, 1.0f,
               matrix_.data(), shape_.cols, q_.data(), rank_, 0.0f, p_.data(), rank_);
}

void PowerSgd::orthogonalize() {
  // Modified Gram-Schmidt over the columns of the row-major rows x rank P, dots in double, each
  // column's projections removed twice ("twice is enough", Giraud et al. 2005): once leaves an
  // error of about eps x cond(P) in the orthogonality, which full rank makes visible. rank is
  // small (1..8 in practice), so the O(rows rank^2) cost is tiny beside the products.
  const std::int64_t rows = shape_.rows;
  for (int j = 0; j < rank_; ++j) {
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < j; ++i) {
        double dot = 0.0;
        for (std::int64_t r = 0; r < rows; ++r) {
          dot += static_cast<double>(p_[r * rank_ + i]) * p_[r * rank_ + j];
        }
        for (std::int64_t r = 0; r < rows; ++r) {
          p_[r * rank_ + j] -= static_cast<float>(dot) * p_[r * rank_ + i];
        }
      }
    }
    double norm = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      norm += static_cast<double>(p_[r * rank_ + j]) * p_[r * rank_ + j];
    }
    // A zero column (M of lower rank than r, or zero) stays zero; a column of rounding noise
    // becomes one more orthonormal direction, which does not change P^ P^T M.
    if (norm == 0.0) continue;
    const double inverse = 1.0 / std::sqrt(norm);
    for (std::int64_t r = 0; r < rows; ++r) {
      p_[r * rank_ + j] = static_cast<float>(p_[r * rank_ + j] * inverse);
    }
  }
}

void PowerSgd::compute_q() {
  tensor::gemm(tensor::Trans::kYes, tensor::Trans::kNo, shape_.cols, rank_, shape_.rows, 1.0f,
               matrix_.data(), shape_.cols, p_.data(), rank_, 0.0f, q_.data(), rank_);
}

void PowerSgd::decode(float* out) {
  tensor::gemm(tensor::Trans::kNo, tensor::Trans::kYes, shape_.rows, shape_.cols, rank_, 1.0f,
               p_.data(), rank_, q_.data(), rank_, 0.0f, matrix_.data(), shape_.cols);
  std::copy(matrix_.begin(), matrix_.begin() + n_, out);
}

void PowerSgd::project_out(float* x) {
  // In the padded matrix, so that a near-square view past n reads zeros.
  std::fill(std::copy(x, x + n_, matrix_.begin()), matrix_.end(), 0.0f);
  scratch_.resize(static_cast<std::size_t>(rank_ * shape_.cols));
  tensor::gemm(tensor::Trans::kYes, tensor::Trans::kNo, rank_, shape_.cols, shape_.rows, 1.0f,
               p_.data(), rank_, matrix_.data(), shape_.cols, 0.0f, scratch_.data(), shape_.cols);
  tensor::gemm(tensor::Trans::kNo, tensor::Trans::kNo, shape_.rows, shape_.cols, rank_, -1.0f,
               p_.data(), rank_, scratch_.data(), shape_.cols, 1.0f, matrix_.data(), shape_.cols);
  std::copy(matrix_.begin(), matrix_.begin() + n_, x);
}

void PowerSgd::compress(const float* x, float* out) {
  compute_p(x);
  orthogonalize();
  compute_q();
  decode(out);
}

}  // namespace dtrain::compress
