#include "dtrain/train/strategies/compressed_mean.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/parallel/reducers/compressed_reducer.h"

namespace dtrain::train {

CompressedMean::CompressedMean(comm::Communicator& comm, const compress::CodecSpec& spec,
                               std::int64_t n, std::uint64_t seed)
    : comm_(comm), spec_(spec), codec_(compress::make_codec(spec)), n_(n), seed_(seed) {
  DTRAIN_CHECK(codec_ != nullptr, "CompressedMean needs a codec, not {}", spec.text());
  payload_.resize(codec_->encoded_bytes(n));
  if (codec_->exchange() == compress::Exchange::kGather) {
    gathered_.resize(payload_.size() * static_cast<std::size_t>(comm.size()));
  }
  if (spec.error_feedback) {
    feedback_.emplace(n);
    sent_.resize(static_cast<std::size_t>(n));
  }
}

void CompressedMean::mean(float* values) {
  const bool gather = codec_->exchange() == compress::Exchange::kGather;
  const std::uint64_t seed = parallel::codec_seed(seed_, 0, calls_, gather ? comm_.rank() : -1);
  ++calls_;
  if (feedback_) {
    feedback_->encode(*codec_, 0, values, n_, payload_.data(), seed, sent_.data());
  } else {
    codec_->encode(values, n_, payload_.data(), seed);
  }
  // The arguments agree on every rank by construction (the same config and model).
  comm::CollectiveOptions options;
  options.check_header = false;
  const auto ranks = static_cast<float>(comm_.size());
  if (gather) {
    comm_.allgather(payload_.data(), gathered_.data(), static_cast<std::int64_t>(payload_.size()),
                    DType::kU8, options);
    std::fill(values, values + n_, 0.0f);
    for (int r = 0; r < comm_.size(); ++r) {
      codec_->decode_add(gathered_.data() + payload_.size() * static_cast<std::size_t>(r), n_,
                         values, parallel::codec_seed(seed_, 0, calls_ - 1, r));
    }
  } else {
    comm_.allreduce(payload_.data(), codec_->wire_count(n_), codec_->wire_dtype(),
                    comm::ReduceOp::kSum, options);
    codec_->decode(payload_.data(), n_, values, seed);
  }
  for (std::int64_t i = 0; i < n_; ++i) values[i] /= ranks;
}

double CompressedMean::predicted_bytes() const {
  const double p = comm_.size();
  const double payload = static_cast<double>(payload_bytes());
  return codec_->exchange() == compress::Exchange::kGather ? (p - 1.0) * payload
                                                           : 2.0 * (p - 1.0) / p * payload;
}

std::string CompressedMean::formula() const {
  return codec_->exchange() == compress::Exchange::kGather
             ? fmt::format("(P-1) x {} B ({} allgather)", payload_bytes(), spec_.text())
             : fmt::format("2 (P-1)/P x {} B ({} allreduce)", payload_bytes(), spec_.text());
}

std::vector<float> CompressedMean::residual() const {
  if (!feedback_) return {};
  return {feedback_->residual().begin(), feedback_->residual().end()};
}

void CompressedMean::set_residual(const std::vector<float>& values) {
  if (feedback_) feedback_->set_residual(values);
}

}  // namespace dtrain::train
