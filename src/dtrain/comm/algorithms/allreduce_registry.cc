// The table of allreduce algorithms selectable by name (CommOptions / CollectiveOptions).
#include <array>
#include <string>

#include "dtrain/base/error.h"
#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm {
namespace {

constexpr std::array<AllreduceAlgorithm, 9> kAllreduceAlgorithms{{
    {"ring", allreduce_ring},
    {"parameter-server", allreduce_parameter_server},
    {"sharded-ps", allreduce_sharded_ps},
    {"tree", allreduce_tree},
    {"halving-doubling", allreduce_halving_doubling},
    {"double-binary-tree", allreduce_double_binary_tree},
    {kHierarchicalAllreduce, nullptr},
    {kNativeAllreduce, allreduce_native},
    {kAutoAllreduce, nullptr},
}};

}  // namespace

std::span<const AllreduceAlgorithm> allreduce_algorithms() { return kAllreduceAlgorithms; }

const AllreduceAlgorithm& find_allreduce_algorithm(std::string_view name) {
  for (const auto& algorithm : kAllreduceAlgorithms) {
    if (algorithm.name == name) return algorithm;
  }
  // Built only here: the auto algorithm looks its choice up on every call.
  std::string accepted;
  for (const auto& algorithm : kAllreduceAlgorithms) {
    accepted += accepted.empty() ? "" : ", ";
    accepted += algorithm.name;
  }
  throw ConfigError(
      fmt::format("unknown allreduce algorithm '{}': expected one of {}", name, accepted));
}

}  // namespace dtrain::comm
