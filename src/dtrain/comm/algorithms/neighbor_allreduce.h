// Neighbour allreduce, the averaging step of decentralized SGD (topology.h): on return rank r's
// output holds sum_j W_rj x_j over its in-neighbours j (itself included), x_j being rank j's input.
//
// Steps: post a receive from every in-neighbour other than r into its own scratch buffer and a
// send of r's input to every out-neighbour, all at once (the transport matches them per peer and
// tag, so any topology is deadlock-free: no rank waits before it has posted all of its sends),
// wait for all of them (each wait under the call's deadline), then combine in blocks of
// kCombineBlock elements: acc = sum_j W_rj x_j in the order of `in` (by rank), in the dtype's own
// precision, so the result does not depend on arrival order.
//
// Cost: alpha + out-degree x N beta when the links work in parallel (N = count x e bytes), plus
// (in-degree + 1) x N reads for the combination. Bytes sent per rank: exactly out-degree x N;
// received: (in-degree - 1) x N (one message each). Scratch: (in-degree - 1) x N.
#pragma once

#include <cstdint>
#include <span>

#include "dtrain/base/dtype.h"
#include "dtrain/comm/algorithms/channel.h"
#include "dtrain/comm/topology.h"

namespace dtrain::comm {

// input, output: (count) of f32 or f64; the same pointer (in place) or disjoint. `in`: this rank's
// in-neighbours, itself included, sorted by rank; `out`: its out-neighbours, itself excluded.
void neighbor_allreduce(Channel& channel, const void* input, void* output, std::int64_t count,
                        DType dtype, std::span<const Neighbor> in, std::span<const int> out);

}  // namespace dtrain::comm
