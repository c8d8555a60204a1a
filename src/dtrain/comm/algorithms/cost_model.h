// The alpha-beta cost model of the allreduce algorithms, in one place: what `auto` chooses by,
// what docs/COMM.md tabulates and what tests/comm/cost_model_test.cc checks against seed 003.
//
// alpha: seconds per message (latency and per-message overhead); beta: seconds per byte on one
// rank's link; N: bytes of the buffer; P: ranks; s: segment bytes of pipelined algorithms. Each
// formula counts the messages and bytes on the busiest rank's critical path; reduction time
// (gamma) is left out: every candidate reduces about (P-1)/P N to N bytes per rank, so it shifts
// all of them alike. In seed 003's notation, ring is 2((P-1) alpha + (P-1)/P N beta) when N fits
// in one segment per block.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "dtrain/comm/algorithms/channel.h"

namespace dtrain::comm {

struct AlphaBeta {
  double alpha = 0.0;  // seconds per message
  double beta = 0.0;   // seconds per byte
};

// Predicted seconds of one allreduce of `bytes` over `ranks` ranks (0 when P = 1 or N = 0):
//   ring               2(P-1) ceil(N/(P s)) alpha + 2(P-1)/P N beta
//   parameter-server   2(P-1) alpha + 2(P-1) N beta                  (all through rank 0)
//   sharded-ps         2(P-1) alpha + 2(P-1)/P N beta
//   tree               2 ceil(log2 P) (alpha + N beta)
//   halving-doubling   2 log2(p') alpha + 2(p'-1)/p' N beta [+ 2(alpha + N beta) if P != p'],
//                      p' = 2^floor(log2 P)
//   double-binary-tree 2(ceil(log2 P) + S - 1) alpha + 2 N beta (N beta when P = 2),
//                      S = ceil(N/(2 s)) segments per half
//   hierarchical       2 ceil(log2 G)(alpha + N beta) + ring over L = ceil(P/G) leaders,
//                      G = local_size (0: G = P)
// ConfigError for a name without a formula ("native", "auto").
double allreduce_cost(std::string_view algorithm, int ranks, double bytes, const AlphaBeta& model,
                      std::size_t segment_bytes, int local_size = 0);

// The algorithms `auto` chooses among, in the order that breaks ties: ring, halving-doubling,
// double-binary-tree, tree, sharded-ps, parameter-server. (hierarchical needs two link classes;
// native is not modelled.)
std::span<const std::string_view> auto_allreduce_candidates();

// The candidate with the least predicted time.
std::string_view choose_allreduce(int ranks, double bytes, const AlphaBeta& model,
                                  std::size_t segment_bytes);

// Measures alpha and beta over `channel`, collectively: ranks 2i and 2i+1 ping-pong a small
// message (alpha = half the round trip) and a large one (beta = (one-way time - alpha) / bytes),
// rank 0 averages the pairs' figures (binomial reduce) and broadcasts them, so every rank returns
// the same values. An odd last rank only takes part in the averaging. About 1 ms on inproc.
AlphaBeta measure_alpha_beta(Channel& channel);

}  // namespace dtrain::comm
