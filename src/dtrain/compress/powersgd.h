// PowerSGD (Vogels et al. 2019): a rank-r approximation of a gradient matrix by one step of
// subspace (power) iteration, warm-started from the previous step's Q.
//
// Shape: a buffer of n elements (a gradient bucket: several tensors back to back) is viewed as
// one row-major matrix M of rows x cols with cols = ceil(sqrt(n)) and rows = ceil(n / cols), the
// missing rows x cols - n elements zero. The near-square shape makes what is sent,
// r (rows + cols) ~ 2 r sqrt(n) floats, as small as any shape of n elements allows.
//
// One step, across P ranks (M_p: rank p's matrix, error feedback already added):
//   P   = M_p Q                 (rows x r)  compute_p()    -> allreduce P (sum)
//   P^  = Gram-Schmidt(P)       orthonormal columns, the same on every rank: orthogonalize()
//   Q_p = M_p^T P^              (cols x r)  compute_q()    -> allreduce Q (sum)
//   sum_p M_p ~ P^ Q^T          (rows x cols) decode()
// Q (the summed one) stays for the next step: the warm start that makes one power iteration per
// step converge over steps. The residual for error feedback is M_p - P^ Q_p^T (decode() before
// Q's allreduce). Bytes per rank and step: two allreduces, of 4 r rows and 4 r cols bytes
// (2 (P-1)/P x 4 r (rows + cols) for ring). Flops: 2 x 2 rows cols r (two products) + 2 rows cols r
// (decode) + 2 rows r^2 (Gram-Schmidt).
//
// With r = min(rows, cols) the approximation is exact (P^ spans M's columns). It pays only when
// r (rows + cols) < n (compresses()); the reducer exchanges a bucket for which it does not pay
// uncompressed, and says so.
//
// Stateful (Q, and the matrix between the steps), so a class of its own rather than a Codec.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::compress {

struct LowRankShape {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  // cols = ceil(sqrt(n)), rows = ceil(n / cols); 0 x 0 for n = 0.
  static LowRankShape of(std::int64_t n);
};

class PowerSgd {
 public:
  // rank in [1, min(rows, cols)] of LowRankShape::of(n) (InternalError otherwise). Q starts as
  // standard normal numbers of (seed): ranks that must agree pass the same seed.
  PowerSgd(std::int64_t n, int rank, std::uint64_t seed);
  // A tensor in its own shape (rows x cols = n, no padding): a Linear weight (out, in), a
  // convolution's (out, in x kh x kw), as PyTorch's PowerSGD hook views them.
  PowerSgd(LowRankShape shape, int rank, std::uint64_t seed);

  std::int64_t size() const { return n_; }
  std::int64_t rows() const { return shape_.rows; }
  std::int64_t cols() const { return shape_.cols; }
  int rank() const { return rank_; }
  // rank x (rows + cols) < n: the factors are smaller than the buffer.
  bool compresses() const;

  // The factors, row-major: P (rows x rank), Q (cols x rank). The reducer allreduces them in
  // place between the steps.
  float* p() { return p_.data(); }
  float* q() { return q_.data(); }
  std::int64_t p_count() const { return shape_.rows * rank_; }
  std::int64_t q_count() const { return shape_.cols * rank_; }

  // M = x (n elements, zero-padded), P = M Q.
  void compute_p(const float* x);
  // P's columns made orthonormal by modified Gram-Schmidt (a zero column stays zero).
  void orthogonalize();
  // Q = M^T P.
  void compute_q();
  // out (n) = the first n elements of P Q^T. Overwrites the matrix M (no longer needed).
  void decode(float* out);
  // x (n elements, viewed as the rows x cols matrix) -= P (P^T x), after orthogonalize(): x
  // without its part in the span of P's columns, the subspace this step sends. Momentum correction
  // restarts a velocity there (compressed_reducer.h). With a padded view, what P P^T x puts in the
  // padding is dropped, as decode() drops it. 4 rows cols rank flops; overwrites the matrix M, as
  // decode() does.
  void project_out(float* x);
  // One rank's whole step without collectives: out = P^ Q^T for x (warm start kept).
  void compress(const float* x, float* out);

 private:
  std::int64_t n_;
  LowRankShape shape_;
  int rank_;
  std::vector<float> matrix_;   // rows x cols
  std::vector<float> p_;        // rows x rank
  std::vector<float> q_;        // cols x rank
  std::vector<float> scratch_;  // rank x cols: P^T x in project_out()
};

}  // namespace dtrain::compress
