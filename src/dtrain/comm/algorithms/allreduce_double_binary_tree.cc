// Double-binary-tree allreduce (NCCL 2.4; Sanders, Speck and Traeff 2009): two complementary
// binary trees (binary_trees.h), tree 0 carrying the first half of the buffer and tree 1 the
// second, each half reduced up its tree to the root and broadcast back down, in segments of
// Channel::segment_bytes so that every level of both trees works at once.
//
// Steps, per tree t, half h_t, segment k, for a rank at depth d of tree t (H: a bound on the
// depth of both trees, the same at every rank):
//   reduce    at time k + H - d: wait for segment k of each child's partial sum, add it into
//             mine, send the result to my parent;
//   broadcast at time k + H + d: wait for segment k of the result from my parent (the root uses
//             its own), send it to my children.
// A child's reduce and a parent's broadcast come one time step before the events that wait for
// them, so when every rank handles its events in (time, stage, tree) order, every wait is for a
// message sent earlier: no cycle, hence no deadlock. All receives are posted at the start in the
// order their senders send them (FIFO matching per (source, tag) needs that, since two ranks can
// be linked in both trees); children's partial sums land in per-child temporaries, the broadcast
// straight into place (it can only arrive after my own partial sum of that segment has left).
//
// Cost, with D = ceil(log2 P) the depth, S = ceil(N / (2 s)) segments of s bytes per half:
// 2(D + S - 1) alpha + 2 N beta (one rank is an inner node of about one tree: 2 children, so it
// receives 2 N/2 + N/2 and sends N/2 + 2 N/2 there, plus N/2 each way as a leaf of the other;
// N each way when P = 2) + N gamma. Latency logarithmic like tree, bandwidth within a factor
// P/(P-1) of ring: NCCL's choice at scale. Exact bytes sent (= received) by rank r:
// e x sum over t of |h_t| (c_t + [r is not the root of t]), c_t its number of children in t.
#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/binary_trees.h"
#include "dtrain/comm/algorithms/blocks.h"

namespace dtrain::comm {
namespace {

constexpr int kStageReduce = 0;
constexpr int kStageBroadcast = 1;

// One event of the schedule, or one message expected from a peer (keyed by its sender's event).
struct Event {
  std::int64_t time;
  int stage;
  int tree;
  std::int64_t segment;
  int slot;  // receives: child index 0/1, or -1 for the parent's broadcast
  bool operator<(const Event& other) const {
    if (time != other.time) return time < other.time;
    if (stage != other.stage) return stage < other.stage;
    return tree < other.tree;
  }
};

}  // namespace

void allreduce_double_binary_tree(Channel& channel, void* data, std::int64_t count, DType dtype,
                                  ReduceOp op) {
  const int ranks = channel.size();
  const int rank = channel.rank();
  if (ranks == 1 || count == 0) return;
  const std::size_t element = dtype_size(dtype);
  const std::int64_t segment = segment_elements(channel.segment_bytes(), element);
  const std::int64_t height = double_binary_tree_depth_bound(ranks);
  auto* bytes = static_cast<std::byte*>(data);

  const std::array<std::int64_t, 2> half_begin{0, count / 2};
  const std::array<std::int64_t, 2> half_size{count / 2, count - count / 2};
  std::array<TreeLinks, 2> links;
  std::array<std::int64_t, 2> segments{};
  for (int t = 0; t < 2; ++t) {
    links[t] = double_binary_tree_links(ranks, rank, t);
    segments[t] = segment_count(half_size[t], segment);
  }
  auto seg_ptr = [&](int t, std::int64_t k) {
    return bytes + static_cast<std::size_t>(half_begin[t] + k * segment) * element;
  };
  auto seg_elements = [&](int t, std::int64_t k) {
    return std::min(segment, half_size[t] - k * segment);
  };
  auto seg_bytes = [&](int t, std::int64_t k) {
    return static_cast<std::size_t>(seg_elements(t, k)) * element;
  };

  // Post every receive, sorted by the sender's event so FIFO matching pairs them right.
  std::vector<Event> expected;
  for (int t = 0; t < 2; ++t) {
    const std::int64_t d = links[t].depth;
    for (std::int64_t k = 0; k < segments[t]; ++k) {
      for (int j = 0; j < 2; ++j) {
        if (links[t].children[j] >= 0)
          expected.push_back({k + height - d - 1, kStageReduce, t, k, j});
      }
      if (links[t].parent >= 0) expected.push_back({k + height + d - 1, kStageBroadcast, t, k, -1});
    }
  }
  std::stable_sort(expected.begin(), expected.end());
  std::array<std::array<std::vector<std::byte>, 2>, 2> partial;  // [tree][child]: children's sums
  std::array<std::array<std::vector<std::unique_ptr<Request>>, 3>, 2>
      recvs;  // [tree][child/parent]
  for (int t = 0; t < 2; ++t) {
    for (int j = 0; j < 2; ++j) {
      if (links[t].children[j] >= 0) {
        partial[t][j].resize(static_cast<std::size_t>(half_size[t]) * element);
        recvs[t][j].resize(static_cast<std::size_t>(segments[t]));
      }
    }
    if (links[t].parent >= 0) recvs[t][2].resize(static_cast<std::size_t>(segments[t]));
  }
  for (const Event& e : expected) {
    const auto k = static_cast<std::size_t>(e.segment);
    if (e.slot >= 0) {
      std::byte* into =
          partial[e.tree][e.slot].data() + k * static_cast<std::size_t>(segment) * element;
      recvs[e.tree][e.slot][k] =
          channel.irecv(links[e.tree].children[e.slot], into, seg_bytes(e.tree, e.segment));
    } else {
      recvs[e.tree][2][k] = channel.irecv(links[e.tree].parent, seg_ptr(e.tree, e.segment),
                                          seg_bytes(e.tree, e.segment));
    }
  }

  // My own events, in the same global order.
  std::vector<Event> events;
  for (int t = 0; t < 2; ++t) {
    const std::int64_t d = links[t].depth;
    for (std::int64_t k = 0; k < segments[t]; ++k) {
      events.push_back({k + height - d, kStageReduce, t, k, 0});
      events.push_back({k + height + d, kStageBroadcast, t, k, 0});
    }
  }
  std::stable_sort(events.begin(), events.end());
  std::vector<std::unique_ptr<Request>> sends;
  for (const Event& e : events) {
    const int t = e.tree;
    const std::int64_t k = e.segment;
    const auto slot = static_cast<std::size_t>(k);
    if (e.stage == kStageReduce) {
      for (int j = 0; j < 2; ++j) {
        if (links[t].children[j] < 0) continue;
        channel.wait(*recvs[t][j][slot]);
        reduce_into(seg_ptr(t, k),
                    partial[t][j].data() + slot * static_cast<std::size_t>(segment) * element,
                    seg_elements(t, k), dtype, op);
      }
      if (links[t].parent >= 0)
        sends.push_back(channel.isend(links[t].parent, seg_ptr(t, k), seg_bytes(t, k)));
    } else {
      if (links[t].parent >= 0) channel.wait(*recvs[t][2][slot]);
      for (int child : links[t].children) {
        if (child >= 0) sends.push_back(channel.isend(child, seg_ptr(t, k), seg_bytes(t, k)));
      }
    }
  }
  channel.wait_all(sends);
}

}  // namespace dtrain::comm
