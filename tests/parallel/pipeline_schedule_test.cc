// Pipeline schedules (parallel/pipeline/schedule.h) checked as lists, and the executor
// (executor.h) running them over in-process ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/parallel/pipeline/executor.h"
#include "dtrain/parallel/pipeline/schedule.h"

namespace dtrain::parallel::pipeline {
namespace {

std::string list_str(const std::vector<Action>& list) {
  std::string s;
  for (const Action& a : list) s += action_name(a) + " ";
  return s;
}

// Runs every stage's list with the executor's message rules: sends never block (they are queued
// per (from, to, kind)), a receive blocks until the matching send was posted, compute never blocks
// but needs its inputs. Returns false on a deadlock (no stage can move and some are not done).
// Also checks that every receive gets the micro-batch it names (FIFO per channel).
bool simulate(const std::vector<std::vector<Action>>& lists, std::string* why) {
  const int p = static_cast<int>(lists.size());
  std::vector<std::size_t> pc(static_cast<std::size_t>(p), 0);
  // Queues of micro-batch numbers: activations s -> s+1, gradients s+1 -> s.
  std::vector<std::vector<int>> act(static_cast<std::size_t>(p)), grad(static_cast<std::size_t>(p));
  std::vector<std::size_t> act_read(static_cast<std::size_t>(p)),
      grad_read(static_cast<std::size_t>(p));
  bool moved = true;
  while (moved) {
    moved = false;
    for (int s = 0; s < p; ++s) {
      const auto& list = lists[static_cast<std::size_t>(s)];
      auto& i = pc[static_cast<std::size_t>(s)];
      while (i < list.size()) {
        const Action& a = list[i];
        if (a.kind == ActionKind::kSendActivation) {
          act[static_cast<std::size_t>(s)].push_back(a.micro_batch);
        } else if (a.kind == ActionKind::kSendGradient) {
          grad[static_cast<std::size_t>(s - 1)].push_back(a.micro_batch);
        } else if (a.kind == ActionKind::kRecvActivation) {
          auto& q = act[static_cast<std::size_t>(s - 1)];
          auto& r = act_read[static_cast<std::size_t>(s - 1)];
          if (r >= q.size()) break;
          if (q[r] != a.micro_batch) {
            *why = "stage " + std::to_string(s) + " expected activation " +
                   std::to_string(a.micro_batch) + " got " + std::to_string(q[r]);
            return false;
          }
          ++r;
        } else if (a.kind == ActionKind::kRecvGradient) {
          auto& q = grad[static_cast<std::size_t>(s)];
          auto& r = grad_read[static_cast<std::size_t>(s)];
          if (r >= q.size()) break;
          if (q[r] != a.micro_batch) {
            *why = "stage " + std::to_string(s) + " expected gradient " +
                   std::to_string(a.micro_batch) + " got " + std::to_string(q[r]);
            return false;
          }
          ++r;
        }
        ++i;
        moved = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    if (pc[static_cast<std::size_t>(s)] != lists[static_cast<std::size_t>(s)].size()) {
      *why = "deadlock: stage " + std::to_string(s) + " stuck at action " +
             std::to_string(pc[static_cast<std::size_t>(s)]);
      return false;
    }
  }
  // Nothing left unread: every send has its receive.
  for (int s = 0; s + 1 < p; ++s) {
    if (act_read[static_cast<std::size_t>(s)] != act[static_cast<std::size_t>(s)].size() ||
        grad_read[static_cast<std::size_t>(s)] != grad[static_cast<std::size_t>(s)].size()) {
      *why =
          "unmatched sends between stages " + std::to_string(s) + " and " + std::to_string(s + 1);
      return false;
    }
  }
  return true;
}

struct Case {
  ScheduleKind kind;
  int p;
  int m;
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB}) {
    for (int p = 1; p <= 4; ++p) {
      for (int m = 1; m <= 8; ++m) cases.push_back({kind, p, m});
    }
  }
  return cases;
}

TEST(PipelineSchedule, EveryMicroBatchOnceDependenciesRespectedNoDeadlock) {
  for (const Case& c : all_cases()) {
    std::vector<std::vector<Action>> lists;
    for (int s = 0; s < c.p; ++s) lists.push_back(make_schedule(c.kind, s, c.p, c.m));
    for (int s = 0; s < c.p; ++s) {
      const auto& list = lists[static_cast<std::size_t>(s)];
      SCOPED_TRACE(std::string(schedule_name(c.kind)) + " p=" + std::to_string(c.p) + " m=" +
                   std::to_string(c.m) + " stage " + std::to_string(s) + ": " + list_str(list));
      std::map<ActionKind, std::vector<int>> seen;
      std::set<int> forwarded, backwarded, received_act, received_grad;
      for (const Action& a : list) {
        seen[a.kind].push_back(a.micro_batch);
        switch (a.kind) {
          case ActionKind::kRecvActivation: received_act.insert(a.micro_batch); break;
          case ActionKind::kForward:
            if (s > 0) {
              ASSERT_TRUE(received_act.count(a.micro_batch)) << "forward before input";
            }
            forwarded.insert(a.micro_batch);
            break;
          case ActionKind::kSendActivation:
            ASSERT_TRUE(forwarded.count(a.micro_batch)) << "send before forward";
            break;
          case ActionKind::kRecvGradient: received_grad.insert(a.micro_batch); break;
          case ActionKind::kBackward:
            ASSERT_TRUE(forwarded.count(a.micro_batch)) << "backward before forward";
            if (s + 1 < c.p) {
              ASSERT_TRUE(received_grad.count(a.micro_batch)) << "backward before its gradient";
            }
            backwarded.insert(a.micro_batch);
            break;
          case ActionKind::kSendGradient:
            ASSERT_TRUE(backwarded.count(a.micro_batch)) << "send before backward";
            break;
          case ActionKind::kOptimizerStep:
            ASSERT_TRUE(backwarded.count(a.micro_batch)) << "update before backward";
            break;
        }
      }
      // Each micro-batch forwarded and backwarded exactly once, backwards in order 0..m-1.
      std::vector<int> in_order(static_cast<std::size_t>(c.m));
      for (int k = 0; k < c.m; ++k) in_order[static_cast<std::size_t>(k)] = k;
      EXPECT_EQ(seen[ActionKind::kBackward], in_order);
      std::vector<int> forwards = seen[ActionKind::kForward];
      EXPECT_EQ(forwards, in_order);
      // Messages only where there is a neighbour, one per micro-batch.
      EXPECT_EQ(seen[ActionKind::kRecvActivation].size(), s > 0 ? in_order.size() : 0u);
      EXPECT_EQ(seen[ActionKind::kSendActivation].size(), s + 1 < c.p ? in_order.size() : 0u);
      EXPECT_EQ(seen[ActionKind::kRecvGradient].size(), s + 1 < c.p ? in_order.size() : 0u);
      EXPECT_EQ(seen[ActionKind::kSendGradient].size(), s > 0 ? in_order.size() : 0u);
      // In flight: GPipe holds all m; 1F1B at most p - s (<= p).
      if (c.kind == ScheduleKind::kGPipe) {
        EXPECT_EQ(peak_in_flight(list), c.m);
      } else {
        EXPECT_EQ(peak_in_flight(list), std::min(c.p - s, c.m));
        EXPECT_LE(peak_in_flight(list), c.p);
      }
    }
    std::string why;
    EXPECT_TRUE(simulate(lists, &why))
        << schedule_name(c.kind) << " p=" << c.p << " m=" << c.m << ": " << why;
  }
}

TEST(PipelineSchedule, OneFOneBStageZeroWithTwoStages) {
  // Warm-up 1 forward, then F1 B0, F2 B1, then B2.
  const auto list = one_f_one_b_schedule(0, 2, 3);
  EXPECT_EQ(list_str(list), "F0 sendA0 F1 sendA1 recvG0 B0 F2 sendA2 recvG1 B1 recvG2 B2 ");
  EXPECT_EQ(list_str(one_f_one_b_schedule(1, 2, 2)), "recvA0 F0 B0 sendG0 recvA1 F1 B1 sendG1 ");
}

TEST(PipelineSchedule, BubbleFormulaAndNames) {
  EXPECT_DOUBLE_EQ(bubble_fraction(1, 8), 0.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(2, 8), 1.0 / 9.0);
  EXPECT_DOUBLE_EQ(bubble_fraction(4, 8), 3.0 / 11.0);
  EXPECT_EQ(parse_schedule("gpipe", "pipeline.schedule"), ScheduleKind::kGPipe);
  EXPECT_EQ(parse_schedule("1f1b", "pipeline.schedule"), ScheduleKind::kOneFOneB);
  try {
    parse_schedule("zb", "pipeline.schedule");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline.schedule"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("gpipe, 1f1b"), std::string::npos);
  }
}

// A stage of y = x + 1 (forward) and dx = dy * 2 (backward) on (k + 1, 3) tensors: after p stages
// the output of micro-batch k is its input + p, and the first stage sees gradient 2^(p-1).
class AddOneStage : public StageCompute {
 public:
  AddOneStage(int stage, int stages) : stage_(stage), stages_(stages) {}
  tensor::Shape input_shape(int k) const override { return {k + 1, 3}; }
  tensor::Shape output_shape(int k) const override { return {k + 1, 3}; }
  const tensor::Tensor& forward(int k, std::size_t slot, const tensor::Tensor* input) override {
    if (out_.size() <= slot) out_.resize(slot + 1);
    out_[slot] = tensor::Tensor::zeros({k + 1, 3});
    for (std::int64_t i = 0; i < out_[slot].numel(); ++i) {
      const float x = input != nullptr ? input->data()[i] : static_cast<float>(100 * k + i);
      out_[slot].data()[i] = x + 1.0f;
    }
    if (stage_ + 1 == stages_) outputs[k] = out_[slot].data()[0];
    return out_[slot];
  }
  const tensor::Tensor& backward(int k, std::size_t slot, const tensor::Tensor* grad) override {
    if (grad_.size() <= slot) grad_.resize(slot + 1);
    grad_[slot] = tensor::Tensor::zeros({k + 1, 3});
    for (std::int64_t i = 0; i < grad_[slot].numel(); ++i) {
      grad_[slot].data()[i] = (grad != nullptr ? grad->data()[i] : 1.0f) * 2.0f;
    }
    if (stage_ == 0) first_grads[k] = grad_[slot].data()[0];
    return grad_[slot];
  }
  std::map<int, float> outputs, first_grads;

 private:
  int stage_, stages_;
  std::vector<tensor::Tensor> out_, grad_;
};

TEST(PipelineExecutor, RunsBothSchedulesOverInprocRanks) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kOneFOneB}) {
    for (int p : {1, 2, 3, 4}) {
      for (int m : {1, 3, 8}) {
        std::mutex mutex;
        std::map<int, float> outputs, first_grads;
        std::vector<StageStats> stats(static_cast<std::size_t>(p));
        comm::spawn_ranks(p, [&](comm::Communicator& comm) {
          StageExecutor executor(comm);
          AddOneStage stage(comm.rank(), p);
          const auto list = make_schedule(kind, comm.rank(), p, m);
          for (int step = 0; step < 2; ++step) {
            stats[static_cast<std::size_t>(comm.rank())] = executor.run(list, m, stage);
          }
          std::lock_guard lock(mutex);
          if (comm.rank() + 1 == p) outputs = stage.outputs;
          if (comm.rank() == 0) first_grads = stage.first_grads;
        });
        SCOPED_TRACE(std::string(schedule_name(kind)) + " p=" + std::to_string(p) +
                     " m=" + std::to_string(m));
        ASSERT_EQ(outputs.size(), static_cast<std::size_t>(m));
        for (int k = 0; k < m; ++k) {
          EXPECT_EQ(outputs[k], static_cast<float>(100 * k + p));
          EXPECT_EQ(first_grads[k], static_cast<float>(1 << p));
        }
        for (int s = 0; s < p; ++s) {
          const StageStats& st = stats[static_cast<std::size_t>(s)];
          EXPECT_EQ(st.peak_in_flight, peak_in_flight(make_schedule(kind, s, p, m)));
          // Bytes: (k + 1) x 3 floats per micro-batch and direction and neighbour.
          std::int64_t per_direction = 0;
          for (int k = 0; k < m; ++k) per_direction += (k + 1) * 3 * 4;
          const int neighbours = (s > 0 ? 1 : 0) + (s + 1 < p ? 1 : 0);
          EXPECT_EQ(st.bytes_sent, neighbours * per_direction);
          EXPECT_EQ(st.bytes_received, neighbours * per_direction);
          EXPECT_GE(st.idle_fraction(), 0.0);
          EXPECT_LE(st.idle_fraction(), 1.0);
        }
      }
    }
  }
}

// PipeDream over several steps and drains, in the run's numbering (step-local k + the micro-batches
// started before): per stage, the steps' lists and drains as one run.
struct PipeDreamRun {
  std::vector<std::vector<Action>> lists;  // per stage, run numbering
};

// `drain_after[i]`: drain after step i. Returns the run for p stages, m micro-batches, `steps`.
PipeDreamRun pipedream_run(int p, int m, int steps, const std::set<int>& drain_after) {
  PipeDreamRun run;
  for (int s = 0; s < p; ++s) {
    std::vector<Action> all;
    int carried = 0;
    for (int step = 0; step < steps; ++step) {
      for (Action a : pipedream_schedule(s, p, m, carried)) {
        a.micro_batch += step * m;
        all.push_back(a);
      }
      carried = pipedream_carried_after(s, p, m, carried);
      if (drain_after.count(step) || step + 1 == steps) {
        for (Action a : pipedream_drain(s, p, carried)) {
          a.micro_batch += (step + 1) * m;
          all.push_back(a);
        }
        carried = 0;
      }
    }
    run.lists.push_back(all);
  }
  return run;
}

TEST(PipelineSchedule, PipeDreamKeepsTheVersionRuleAcrossStepsAndDrains) {
  // Stage s forwards and backwards micro-batch n with its weights after max(D, n - (p - 1 - s))
  // updates (D: micro-batches before the last drain), each micro-batch forwarded, backwarded and
  // applied once, in order; at most p - s in flight; no deadlock.
  for (int p = 1; p <= 4; ++p) {
    for (int m = 1; m <= 6; ++m) {
      const int steps = 4;
      const PipeDreamRun run = pipedream_run(p, m, steps, {1});
      for (int s = 0; s < p; ++s) {
        const auto& list = run.lists[static_cast<std::size_t>(s)];
        SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) + " stage " +
                     std::to_string(s) + ": " + list_str(list));
        int updates = 0, in_flight = 0, peak = 0;
        std::vector<int> forwards, backwards, applied;
        std::map<int, int> forward_version;
        for (const Action& a : list) {
          if (a.kind == ActionKind::kForward) {
            const int n = a.micro_batch;
            const int drained = n >= 2 * m ? 2 * m : 0;  // the drain after step 1
            EXPECT_EQ(updates, std::max(drained, n - (p - 1 - s))) << "forward of " << n;
            forward_version[n] = updates;
            forwards.push_back(n);
            peak = std::max(peak, ++in_flight);
          } else if (a.kind == ActionKind::kBackward) {
            backwards.push_back(a.micro_batch);
            --in_flight;
          } else if (a.kind == ActionKind::kOptimizerStep) {
            ASSERT_FALSE(backwards.empty());
            EXPECT_EQ(a.micro_batch, backwards.back()) << "update right after its backward";
            EXPECT_EQ(updates, a.micro_batch) << "updates in micro-batch order";
            applied.push_back(a.micro_batch);
            ++updates;
          }
        }
        std::vector<int> all(static_cast<std::size_t>(steps * m));
        for (int n = 0; n < steps * m; ++n) all[static_cast<std::size_t>(n)] = n;
        EXPECT_EQ(forwards, all);
        EXPECT_EQ(backwards, all);
        EXPECT_EQ(applied, all);
        EXPECT_EQ(in_flight, 0);
        EXPECT_LE(peak, p - s);
        if (m >= p) {
          EXPECT_EQ(peak, p - s);
        }
      }
      std::string why;
      EXPECT_TRUE(simulate(run.lists, &why)) << "p=" << p << " m=" << m << ": " << why;
    }
  }
  // Two stages, 3 micro-batches a step: stage 0 lags one micro-batch, across the step boundary.
  EXPECT_EQ(list_str(pipedream_schedule(0, 2, 3, 0)),
            "F0 sendA0 F1 sendA1 recvG0 B0 U0 F2 sendA2 recvG1 B1 U1 ");
  EXPECT_EQ(list_str(pipedream_schedule(0, 2, 3, 1)),
            "F0 sendA0 recvG-1 B-1 U-1 F1 sendA1 recvG0 B0 U0 F2 sendA2 recvG1 B1 U1 ");
  EXPECT_EQ(list_str(pipedream_schedule(1, 2, 2, 0)),
            "recvA0 F0 B0 sendG0 U0 recvA1 F1 B1 sendG1 U1 ");
  EXPECT_EQ(list_str(pipedream_drain(0, 2, 1)), "recvG-1 B-1 U-1 ");
  EXPECT_EQ(parse_schedule("pipedream", "pipeline.schedule"), ScheduleKind::kPipeDream);
  EXPECT_DOUBLE_EQ(schedule_bubble(ScheduleKind::kPipeDream, 4, 8), 0.0);
  EXPECT_THROW(pipedream_schedule(0, 2, 3, 2), InternalError);  // more carried than the lag
}

// A PipeDream stage of y = x + 1, dx = 2 dy on (2, 3) tensors that records which version (count of
// optimizer steps) each micro-batch's forward and backward saw, in the run's numbering.
class VersionStage : public StageCompute {
 public:
  // Slots are sized once: the executor keeps pointers to the returned tensors.
  VersionStage(int stage, int stages)
      : stage_(stage), stages_(stages), out_(8), grad_(8), version_(8) {}
  tensor::Shape input_shape(int) const override { return {2, 3}; }
  tensor::Shape output_shape(int) const override { return {2, 3}; }
  const tensor::Tensor& forward(int k, std::size_t slot, const tensor::Tensor* input) override {
    grow(slot);
    const int n = base + k;
    version_[slot] = updates_;
    forward_version[n] = updates_;
    out_[slot] = tensor::Tensor::zeros({2, 3});
    for (std::int64_t i = 0; i < 6; ++i) {
      out_[slot].data()[i] = (input != nullptr ? input->data()[i] : static_cast<float>(10 * n)) + 1;
    }
    if (stage_ + 1 == stages_) outputs[n] = out_[slot].data()[0];
    return out_[slot];
  }
  const tensor::Tensor& backward(int k, std::size_t slot, const tensor::Tensor* grad) override {
    grow(slot);
    backward_version[base + k] = version_[slot];  // the stash's version
    grad_[slot] = tensor::Tensor::zeros({2, 3});
    for (std::int64_t i = 0; i < 6; ++i) {
      grad_[slot].data()[i] = (grad != nullptr ? grad->data()[i] : 1.0f) * 2.0f;
    }
    if (stage_ == 0) first_grads[base + k] = grad_[slot].data()[0];
    return grad_[slot];
  }
  void optimizer_step(int k) override {
    order.push_back(base + k);
    ++updates_;
  }
  int base = 0;  // micro-batches started before this call
  std::map<int, int> forward_version, backward_version;
  std::map<int, float> outputs, first_grads;
  std::vector<int> order;

 private:
  void grow(std::size_t slot) { ASSERT_LT(slot, out_.size()); }
  int stage_, stages_;
  int updates_ = 0;
  std::vector<tensor::Tensor> out_, grad_;
  std::vector<int> version_;
};

TEST(PipelineExecutor, RunsPipeDreamAcrossStepsOverInprocRanks) {
  // 5 steps of m micro-batches with a drain after step 2 and at the end: values and gradients
  // arrive across the step boundaries, and every stage saw the version the rule says.
  for (int p : {1, 2, 3, 4}) {
    for (int m : {1, 2, 5}) {
      const int steps = 5;
      std::mutex mutex;
      std::vector<std::map<int, int>> forward(static_cast<std::size_t>(p)),
          backward(static_cast<std::size_t>(p));
      std::vector<std::vector<int>> order(static_cast<std::size_t>(p));
      std::map<int, float> outputs, first_grads;
      comm::spawn_ranks(p, [&](comm::Communicator& comm) {
        const int s = comm.rank();
        StageExecutor executor(comm);
        VersionStage stage(s, p);
        const auto slots = static_cast<std::size_t>(p - s);
        int carried = 0;
        for (int step = 0; step < steps; ++step) {
          stage.base = step * m;
          executor.run_continued(pipedream_schedule(s, p, m, carried), m, slots, stage);
          carried = pipedream_carried_after(s, p, m, carried);
          if (step == 2 || step + 1 == steps) {
            stage.base = (step + 1) * m;
            executor.run_continued(pipedream_drain(s, p, carried), 0, slots, stage);
            carried = 0;
            EXPECT_EQ(executor.continued_in_flight(), 0u);
          }
        }
        std::lock_guard lock(mutex);
        forward[static_cast<std::size_t>(s)] = stage.forward_version;
        backward[static_cast<std::size_t>(s)] = stage.backward_version;
        order[static_cast<std::size_t>(s)] = stage.order;
        if (s + 1 == p) outputs = stage.outputs;
        if (s == 0) first_grads = stage.first_grads;
      });
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const int total = steps * m;
      ASSERT_EQ(outputs.size(), static_cast<std::size_t>(total));
      for (int n = 0; n < total; ++n) {
        EXPECT_EQ(outputs[n], static_cast<float>(10 * n + p));
        EXPECT_EQ(first_grads[n], static_cast<float>(1 << p));
      }
      for (int s = 0; s < p; ++s) {
        const auto i = static_cast<std::size_t>(s);
        ASSERT_EQ(order[i].size(), static_cast<std::size_t>(total));
        for (int n = 0; n < total; ++n) {
          EXPECT_EQ(order[i][static_cast<std::size_t>(n)], n);
          const int drained = n >= 3 * m ? 3 * m : 0;
          EXPECT_EQ(forward[i][n], std::max(drained, n - (p - 1 - s)))
              << "stage " << s << " n " << n;
          EXPECT_EQ(backward[i][n], forward[i][n]) << "stage " << s << " n " << n;
        }
      }
    }
  }
}

TEST(PipelineExecutor, ADeadStageFailsItsNeighbourWithItsRankNamed) {
  comm::CommOptions options;
  options.timeout = std::chrono::milliseconds(2000);
  std::atomic<bool> named{false};
  EXPECT_THROW(comm::spawn_ranks(
                   2,
                   [&](comm::Communicator& comm) {
                     if (comm.rank() == 0) throw DataError("stage 0 died");
                     StageExecutor executor(comm);
                     AddOneStage stage(1, 2);
                     try {
                       executor.run(one_f_one_b_schedule(1, 2, 2), 2, stage);
                     } catch (const Error& e) {
                       named = std::string(e.what()).find("rank 0") != std::string::npos;
                       throw;
                     }
                   },
                   options),
               Error);
  EXPECT_TRUE(named.load());
}

}  // namespace
}  // namespace dtrain::parallel::pipeline
