#include "dtrain/parallel/rank_agreement.h"

#include <fmt/format.h>

#include <cstdint>
#include <sstream>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/tensor/tensor.h"

namespace dtrain::parallel {
namespace {

// The first line where a and b differ (1-based), with both lines; {0, "", ""} when equal.
struct LineDiff {
  std::size_t line = 0;
  std::string mine, theirs;
};

LineDiff first_difference(const std::string& mine, const std::string& theirs) {
  std::istringstream a(mine), b(theirs);
  std::string la, lb;
  for (std::size_t line = 1;; ++line) {
    const bool has_a = static_cast<bool>(std::getline(a, la));
    const bool has_b = static_cast<bool>(std::getline(b, lb));
    if (!has_a && !has_b) return {};
    if (!has_a) la = "<end>";
    if (!has_b) lb = "<end>";
    if (!has_a || !has_b || la != lb) return {line, la, lb};
  }
}

}  // namespace

void check_same_on_all_ranks(comm::Communicator& comm, const std::string& text,
                             const std::string& what) {
  std::int64_t length = static_cast<std::int64_t>(text.size());
  comm.broadcast(&length, 1, DType::kI64, 0);
  std::string root_text =
      comm.rank() == 0 ? text : std::string(static_cast<std::size_t>(length), '\0');
  comm.broadcast(root_text.data(), length, DType::kU8, 0);
  const LineDiff diff = first_difference(text, root_text);
  std::uint8_t differs = diff.line != 0 ? 1 : 0;
  std::vector<std::uint8_t> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(&differs, all.data(), 1, DType::kU8);
  std::string ranks;
  for (int r = 0; r < comm.size(); ++r) {
    if (all[static_cast<std::size_t>(r)] != 0)
      ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", r);
  }
  if (ranks.empty()) return;
  if (differs != 0) {
    throw ConfigError(fmt::format(
        "rank {}: {} differs from rank 0's at line {}: this rank has '{}', rank 0 has '{}'; start "
        "every rank with the same config, flags and binary",
        comm.rank(), what, diff.line, diff.mine, diff.theirs));
  }
  throw ConfigError(fmt::format(
      "rank {}: {} of rank(s) {} differs from rank 0's (their errors name the line); start every "
      "rank with the same config, flags and binary",
      comm.rank(), what, ranks));
}

void broadcast_parameters(comm::Communicator& comm, nn::ParamStore& store) {
  comm.broadcast(store.params(), store.num_params(), DType::kF32, 0);
  std::int64_t buffer_count = 0;
  for (const auto& e : store.buffer_entries()) buffer_count += e.numel;
  if (buffer_count > 0) comm.broadcast(store.buffers(), buffer_count, DType::kF32, 0);
}

std::string parameter_layout(const nn::ParamStore& store) {
  std::string out;
  for (const auto& e : store.param_entries()) {
    out += fmt::format("param {} {} @{}\n", e.name, tensor::shape_str(e.shape), e.offset);
  }
  for (const auto& e : store.buffer_entries()) {
    out += fmt::format("buffer {} {} @{}\n", e.name, tensor::shape_str(e.shape), e.offset);
  }
  return out;
}

}  // namespace dtrain::parallel
