// Bucketing (Karimireddy et al. 2022): shuffle the n inputs, average them in buckets of s
// consecutive ones (ceil(n/s) buckets, the last one smaller when s does not divide n), and give the
// bucket means to another aggregator. Averaging shrinks the spread of the honest inputs (their
// variance by s) that robust aggregators mistake for an attack under heterogeneous data, while a
// Byzantine input still spoils only its own bucket: tolerated(n) = the inner aggregator's
// tolerated(ceil(n/s)).
//
// The shuffle of call t is a pure function of (seed, t) (Philox, base/rng.h): every run with the
// same seed draws the same buckets. s = 1 only reorders the inputs.
// Cost: n d additions for the bucket means (summed in double in shuffled order) plus the inner
// aggregator's cost on ceil(n/s) inputs; scratch: ceil(n/s) d floats and d doubles.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dtrain/aggregate/aggregator.h"

namespace dtrain::aggregate {

class Bucketing final : public Aggregator {
 public:
  // bucket_size s >= 1, inner non-null (InternalError otherwise).
  Bucketing(int bucket_size, std::unique_ptr<Aggregator> inner, std::uint64_t seed);
  std::string name() const override;
  int tolerated(int n) const override { return inner_->tolerated(buckets(n)); }
  // The inner aggregator's check on the bucket count, named as such.
  void check_inputs(int n) const override;
  int buckets(int n) const { return (n + bucket_size_ - 1) / bucket_size_; }
  Aggregator& inner() { return *inner_; }
  // The call count (which shuffle comes next), then the inner aggregator's state.
  std::vector<double> state() const override;
  void load_state(std::span<const double> values) override;
  bool state_fits(std::span<const double> values, std::int64_t d) const override {
    return !values.empty() && inner_->state_fits(values.subspan(1), d);
  }
  // Of the last call: input order after the shuffle (bucket b = [b s, (b + 1) s) of it).
  const std::vector<int>& order() const { return order_; }

 protected:
  void run(Inputs inputs, std::int64_t d, float* out) override;

 private:
  int bucket_size_;
  std::unique_ptr<Aggregator> inner_;
  std::uint64_t seed_;
  std::uint64_t calls_ = 0;
  std::vector<int> order_;
  std::vector<float> means_;  // (buckets, d)
  std::vector<const float*> members_;
  std::vector<const float*> bucket_pointers_;
  std::vector<double> sum_;
};

}  // namespace dtrain::aggregate
