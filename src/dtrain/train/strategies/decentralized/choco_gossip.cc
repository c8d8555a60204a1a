#include "dtrain/train/strategies/decentralized/choco_gossip.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "dtrain/base/error.h"
#include "dtrain/parallel/reducers/compressed_reducer.h"

namespace dtrain::train {
namespace {

// The point-to-point tag of the gossip's payloads (matched FIFO per peer and tag).
constexpr std::uint64_t kTag = 0xC40C0;

}  // namespace

double ChocoGossip::default_gamma(const compress::CodecSpec& spec, std::int64_t n) {
  switch (spec.kind) {
    case compress::CodecKind::kNone:
    case compress::CodecKind::kFp16:
    case compress::CodecKind::kBf16: return 1.0;
    case compress::CodecKind::kTopk:
    case compress::CodecKind::kRandomk:
      return std::min(0.4, 10.0 * static_cast<double>(spec.keep.of(n)) /
                               static_cast<double>(std::max<std::int64_t>(n, 1)));
    default: return 0.4;
  }
}

double ChocoGossip::damping(const compress::CodecSpec& spec, std::int64_t n) {
  if (spec.kind != compress::CodecKind::kQsgd) return 1.0;
  const double s = static_cast<double>((1 << (spec.bits - 1)) - 1);
  const auto values = static_cast<double>(n);
  return 1.0 / (1.0 + std::min(values / (s * s), std::sqrt(values) / s));
}

ChocoGossip::ChocoGossip(comm::Communicator& comm, const comm::Topology& topology,
                         const compress::CodecSpec& spec, double gamma, const float* x,
                         std::int64_t n, std::uint64_t seed)
    : comm_(comm),
      topology_(topology),
      spec_(spec),
      codec_(compress::make_codec(spec)),
      gamma_(gamma),
      damping_(static_cast<float>(damping(spec, n))),
      n_(n),
      seed_(seed),
      x_hat_(x, x + n),
      mix_(x, x + n),
      q_(static_cast<std::size_t>(n)),
      decoded_(static_cast<std::size_t>(n)) {
  DTRAIN_CHECK(!topology.time_varying(), "CHOCO gossip needs a static topology, not {}",
               topology.name());
  DTRAIN_CHECK(spec.kind != compress::CodecKind::kPowerSgd, "CHOCO gossip: no PowerSGD");
  payload_.resize(payload_bytes());
  for (const comm::Neighbor& neighbor : topology_.in_neighbors(comm.rank(), 0)) {
    if (neighbor.rank != comm.rank()) received_.emplace_back(payload_.size());
  }
}

std::size_t ChocoGossip::payload_bytes() const {
  return codec_ ? codec_->encoded_bytes(n_) : 4 * static_cast<std::size_t>(n_);
}

void ChocoGossip::step(float* x, std::int64_t step) {
  const int rank = comm_.rank();
  for (std::int64_t i = 0; i < n_; ++i) q_[i] = static_cast<float>(x[i] - x_hat_[i]);
  const auto seed_of = [&](int r) { return parallel::codec_seed(seed_, 0, step, r); };
  if (codec_) {
    codec_->encode(q_.data(), n_, payload_.data(), seed_of(rank));
    codec_->decode(payload_.data(), n_, q_.data(), seed_of(rank));
    if (damping_ != 1.0f) {
      for (std::int64_t i = 0; i < n_; ++i) q_[i] *= damping_;
    }
  } else {
    std::memcpy(payload_.data(), q_.data(), payload_.size());
  }
  const auto sent_before = comm_.stats().get("send").bytes_sent;
  // Receives first, then sends: neighbours sending to each other never wait on each other.
  const std::vector<comm::Neighbor> in = topology_.in_neighbors(rank, step);
  std::vector<comm::PendingMessage> pending;
  std::size_t slot = 0;
  for (const comm::Neighbor& neighbor : in) {
    if (neighbor.rank == rank) continue;
    pending.push_back(comm_.irecv(received_[slot++].data(),
                                  static_cast<std::int64_t>(payload_.size()), DType::kU8,
                                  neighbor.rank, kTag));
  }
  for (int peer : topology_.out_neighbors(rank, step)) {
    pending.push_back(comm_.isend(payload_.data(), static_cast<std::int64_t>(payload_.size()),
                                  DType::kU8, peer, kTag));
  }
  for (comm::PendingMessage& message : pending) message.wait();
  bytes_sent_ += static_cast<double>(comm_.stats().get("send").bytes_sent - sent_before);
  // x_hat_i += q_i; m_i += sum_j W_ij q_j (in in-neighbour order: deterministic).
  std::vector<float>& decoded = decoded_;
  slot = 0;
  for (const comm::Neighbor& neighbor : in) {
    const double w = neighbor.weight;
    const float* q = q_.data();
    if (neighbor.rank != rank) {
      const std::uint8_t* bytes = received_[slot++].data();
      if (codec_) {
        codec_->decode(bytes, n_, decoded.data(), seed_of(neighbor.rank));
        if (damping_ != 1.0f) {
          for (std::int64_t i = 0; i < n_; ++i) decoded[i] *= damping_;
        }
      } else {
        std::memcpy(decoded.data(), bytes, payload_.size());  // the f32 difference itself
      }
      q = decoded.data();
    }
    for (std::int64_t i = 0; i < n_; ++i) mix_[i] += w * static_cast<double>(q[i]);
  }
  for (std::int64_t i = 0; i < n_; ++i) {
    x_hat_[i] += static_cast<double>(q_[i]);
    x[i] = static_cast<float>(static_cast<double>(x[i]) + gamma_ * (mix_[i] - x_hat_[i]));
  }
}

void ChocoGossip::reset(const float* x) {
  std::copy(x, x + n_, x_hat_.begin());
  comm::CollectiveOptions options;
  options.check_header = false;
  comm_.neighbor_allreduce(x_hat_.data(), mix_.data(), n_, DType::kF64, topology_, 0, options);
}

}  // namespace dtrain::train
