#include "dtrain/train/strategies/per_rank_state.h"

#include <fmt/format.h>

#include <set>
#include <utility>

#include "dtrain/base/error.h"

namespace dtrain::train {

std::string rank_prefix(int rank) { return fmt::format("rank{}/", rank); }

std::vector<optim::StateTensor> gather_per_rank(comm::Communicator& comm,
                                                const std::vector<optim::StateTensor>& mine,
                                                bool root_only) {
  const int world = comm.size();
  const bool receives = !root_only || comm.rank() == 0;
  std::vector<optim::StateTensor> all;
  for (const optim::StateTensor& tensor : mine) {
    const auto count = static_cast<std::int64_t>(tensor.values.size());
    std::vector<float> gathered(receives ? tensor.values.size() * static_cast<std::size_t>(world)
                                         : 0);
    if (count > 0) {
      if (root_only) {
        comm.gather(tensor.values.data(), receives ? gathered.data() : nullptr, count, DType::kF32,
                    0);
      } else {
        comm.allgather(tensor.values.data(), gathered.data(), count, DType::kF32);
      }
    }
    if (!receives) continue;
    for (int r = 0; r < world; ++r) {
      const auto begin = gathered.begin() + static_cast<std::ptrdiff_t>(r) * count;
      all.push_back({rank_prefix(r) + tensor.name, std::vector<float>(begin, begin + count)});
    }
  }
  return all;
}

PerRankState split_per_rank(std::vector<optim::StateTensor>& state, int rank) {
  const std::string prefix = rank_prefix(rank);
  PerRankState out;
  std::set<std::string> writers;  // the "rankN/" prefixes the checkpoint holds
  for (optim::StateTensor& tensor : state) {
    const auto slash = tensor.name.find('/');
    if (tensor.name.rfind("rank", 0) == 0 && slash != std::string::npos) {
      writers.insert(tensor.name.substr(0, slash + 1));
    }
    if (tensor.name.rfind(prefix, 0) == 0) {
      out.mine.push_back({tensor.name.substr(prefix.size()), std::move(tensor.values)});
    }
  }
  out.writers = writers.size();
  return out;
}

void check_per_rank_writers(const PerRankState& split, int world, const std::string& path,
                            const std::string& holds, const std::string& own) {
  if (split.writers == 0 || std::cmp_equal(split.writers, world)) return;
  throw CheckpointError(fmt::format(
      "checkpoint {} holds {} of {} ranks, and this run has {}; each rank's {} its own, so "
      "resume with {} ranks (--workers {}, or as many ranks under mpirun), or leave out --resume "
      "to start a new run",
      path, holds, split.writers, world, own, split.writers, split.writers));
}

}  // namespace dtrain::train
