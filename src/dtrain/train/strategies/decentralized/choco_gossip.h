// CHOCO-SGD's compressed gossip (Koloskova, Stich & Jaggi, ICML 2019, Algorithm 2; docs/
// DECENTRALIZED.md, "Compressed gossip"): decentralized.compression other than none.
//
// Every rank i keeps a public copy x_hat_i of its replica, which its neighbours can rebuild from
// what it sent, and m_i = sum_j W_ij x_hat_j, the mix of its in-neighbours' public copies (itself
// included). After the local step x_i^{t+1/2}:
//   q_i      = C(x_i^{t+1/2} - x_hat_i)                  encoded once, sent to each out-neighbour
//   x_hat_i += q_i;  m_i += sum_j W_ij q_j                 (q_j decoded from j's payload)
//   x_i      = x_i^{t+1/2} + gamma (m_i - x_hat_i)        = x + gamma sum_j W_ij (x_hat_j -
//   x_hat_i)
// Keeping m instead of every neighbour's x_hat_j needs a static W (ring, torus, exponential,
// full): the config refuses one-peer-exponential, whose neighbour changes every step. With the
// identity codec (codec null: q is the f32 difference) and gamma = 1, x_hat_i = x_i^{t+1/2} and
// x_i = sum_j W_ij x_j^{t+1/2}: D-PSGD's gossip exactly (tests/train/decentralized_test.cc). No
// error feedback: x_hat plays its part (what q left out stays in x - x_hat and is sent later).
//
// Start: the replicas are equal (broadcast), so x_hat_i = x and m_i = x without a message. After a
// resume they differ: reset() sets x_hat_i = x_i and m_i = sum_j W_ij x_j with one exact neighbour
// allreduce (f64, counted).
//
// Bytes per rank and step: out-degree x encoded_bytes(N), point-to-point (the "send" counter).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/comm/topology.h"
#include "dtrain/compress/codec.h"
#include "dtrain/compress/codec_spec.h"

namespace dtrain::train {

class ChocoGossip {
 public:
  // `spec` none: the identity (f32 differences). `topology`: static. `x`: the replicas' common
  // starting point (N values). `gamma` in (0, 1].
  ChocoGossip(comm::Communicator& comm, const comm::Topology& topology,
              const compress::CodecSpec& spec, double gamma, const float* x, std::int64_t n,
              std::uint64_t seed);

  // x (N): this rank's replica after its local step; replaced by the mixed one. Collective among
  // neighbours. `step`: the global step (the codec's seeds).
  void step(float* x, std::int64_t step);
  // After the replicas changed apart from the gossip (a resume): x_hat = x, m = W x. Collective.
  void reset(const float* x);

  double gamma() const { return gamma_; }
  // Bytes this rank's gossip sent, measured by the communicator's "send" counter around each
  // exchange (the resets' neighbour allreduces excluded).
  double bytes_sent() const { return bytes_sent_; }
  std::size_t payload_bytes() const;
  std::string codec_text() const { return spec_.text(); }
  // The default consensus step for a codec over n values (decentralized.consensus_step = 0): 1
  // for none, fp16 and bf16; min(0.4, 10 k / n) for top-k and random-k keeping k; 0.4 for sign
  // and QSGD (docs/DECENTRALIZED.md, "Compressed gossip", has the measurements behind them).
  static double default_gamma(const compress::CodecSpec& spec, std::int64_t n);
  // QSGD's 1 / tau, tau = 1 + min(n / s^2, sqrt(n) / s) (Alistarh et al.'s variance bound; CHOCO's
  // experiments scale QSGD so): the unscaled quantizer is no contraction, and CHOCO diverges with
  // it. 1 for the other codecs.
  static double damping(const compress::CodecSpec& spec, std::int64_t n);

 private:
  comm::Communicator& comm_;
  comm::Topology topology_;
  compress::CodecSpec spec_;
  std::unique_ptr<compress::Codec> codec_;  // null: identity
  double gamma_;
  float damping_;  // q = damping x decode(payload)
  std::int64_t n_;
  std::uint64_t seed_;
  double bytes_sent_ = 0.0;
  // x_hat and m in f64: with the identity codec and gamma = 1 the mix is then D-PSGD's to f32
  // rounding, step after step (in f32, m's running sum drifts by about 1e-7 per step).
  std::vector<double> x_hat_;
  std::vector<double> mix_;  // m
  std::vector<float> q_;
  std::vector<float> decoded_;  // a neighbour's q
  std::vector<std::uint8_t> payload_;
  std::vector<std::vector<std::uint8_t>> received_;  // one per in-neighbour other than this rank
};

}  // namespace dtrain::train
