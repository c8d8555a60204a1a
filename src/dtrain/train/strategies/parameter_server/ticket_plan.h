// Batches as tickets (parameter servers with consistency async or ssp; docs/PS.md): server 0
// counts tickets over the whole run and hands the next one to whichever worker asks, so that a
// fast worker trains on more of each epoch than a slow one. Ticket t is `ps_local_batch`
// consecutive samples of epoch t / T's order (T = tickets per epoch = ceil(N / local batch)).
#pragma once

#include <cstdint>
#include <optional>

#include "dtrain/data/batch_plan.h"
#include "dtrain/ps/client.h"
#include "dtrain/train/config.h"

namespace dtrain::train {

// A worker's batch: train.batch_size / workers samples (at least one).
std::int64_t ps_local_batch(const Config& config, std::int64_t workers);
std::int64_t ps_tickets_per_epoch(const Config& config, std::int64_t workers,
                                  std::int64_t train_samples);

class TicketPlan final : public data::SharePlan {
 public:
  // `client` must outlive the plan.
  TicketPlan(const Config& config, int workers, std::int64_t train_samples, ps::Client& client);
  // About tickets / workers steps each: a progress bar's and a schedule's epoch.
  std::int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  // `position` (a resume inside the epoch): the tickets before position / local batch were
  // trained before the checkpoint; the epoch goes on from there.
  void begin_epoch(std::int64_t epoch, std::int64_t position) override;
  std::optional<data::Share> next() override;
  bool independent() const override { return true; }
  // The epoch's tickets server 0 has handed out (to any worker) x the local batch, at most the
  // epoch's samples: one round trip to server 0.
  std::int64_t checkpoint_position(std::int64_t steps_position) override;

 private:
  ps::Client& client_;
  int workers_;
  std::int64_t n_;
  std::int64_t local_batch_;
  std::int64_t tickets_per_epoch_;
  std::int64_t steps_per_epoch_;
  std::int64_t epoch_ = 0;
  std::int64_t first_ticket_ = 0;  // the lowest ticket of the epoch this run may train on
  std::int64_t pending_ = -1;      // a ticket of a later epoch, kept for it
  bool exhausted_ = false;
};

}  // namespace dtrain::train
