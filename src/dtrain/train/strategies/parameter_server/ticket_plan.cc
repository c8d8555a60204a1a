#include "dtrain/train/strategies/parameter_server/ticket_plan.h"

#include <algorithm>

namespace dtrain::train {

std::int64_t ps_local_batch(const Config& config, std::int64_t workers) {
  return std::max<std::int64_t>(1, config.train.batch_size / workers);
}

std::int64_t ps_tickets_per_epoch(const Config& config, std::int64_t workers,
                                  std::int64_t train_samples) {
  const std::int64_t local = ps_local_batch(config, workers);
  return (train_samples + local - 1) / local;
}

TicketPlan::TicketPlan(const Config& config, int workers, std::int64_t train_samples,
                       ps::Client& client)
    : client_(client),
      workers_(workers),
      n_(train_samples),
      local_batch_(ps_local_batch(config, workers)),
      tickets_per_epoch_(ps_tickets_per_epoch(config, workers, train_samples)),
      steps_per_epoch_((tickets_per_epoch_ + workers - 1) / workers) {
  data::check_batch_covers_ranks(config.train.batch_size, workers, config.train.accumulate_steps);
}

void TicketPlan::begin_epoch(std::int64_t epoch, std::int64_t position) {
  epoch_ = epoch;
  first_ticket_ = epoch * tickets_per_epoch_ + (position + local_batch_ - 1) / local_batch_;
}

std::int64_t TicketPlan::checkpoint_position(std::int64_t /*steps_position*/) {
  const std::int64_t handed = client_.peek_ticket() - epoch_ * tickets_per_epoch_;
  return std::min(n_, std::clamp<std::int64_t>(handed, 0, tickets_per_epoch_) * local_batch_);
}

std::optional<data::Share> TicketPlan::next() {
  // Tickets count over the whole run; one of the next epoch waits for the next epoch. None of an
  // earlier epoch: a run resumed at epoch e starts at e's first ticket.
  if (pending_ < 0 && !exhausted_) pending_ = client_.next_ticket(first_ticket_);
  if (pending_ < 0) {
    exhausted_ = true;
    return std::nullopt;
  }
  if (pending_ / tickets_per_epoch_ > epoch_) return std::nullopt;
  const std::int64_t begin = (pending_ % tickets_per_epoch_) * local_batch_;
  pending_ = -1;
  const std::int64_t size = std::min(local_batch_, n_ - begin);
  // A ticket's gradient is a 1/W share of a global batch (linear scaling to the worker's batch):
  // W pushes then move the parameters as far as one synchronous step, rather than W times as far,
  // which with the momentum asynchrony adds diverged at W = 6 (docs/PS.md).
  return data::Share{begin, size, size, local_batch_ * workers_};
}

}  // namespace dtrain::train
