#include "dtrain/experiments/collective_benchmark.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <mutex>

#include "dtrain/base/error.h"
#include "dtrain/base/timer.h"
#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/half.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/comm/transport/mpi/world.h"

namespace dtrain::experiments {

// Written inside dtrain::comm before the experiments left it; its names read unqualified here.
using namespace dtrain::comm;  // NOLINT(google-build-using-namespace)
namespace {

// Writes the small integer `value` (|value| <= 256, exact in every dtype) at element i.
void put_value(std::byte* data, std::int64_t i, DType dtype, double value) {
  const auto at = static_cast<std::size_t>(i) * dtype_size(dtype);
  auto store = [&](auto typed) { std::memcpy(data + at, &typed, sizeof(typed)); };
  switch (dtype) {
    case DType::kF32: store(static_cast<float>(value)); break;
    case DType::kF64: store(value); break;
    case DType::kF16: store(float_to_f16(static_cast<float>(value))); break;
    case DType::kBF16: store(float_to_bf16(static_cast<float>(value))); break;
    case DType::kI32: store(static_cast<std::int32_t>(value)); break;
    case DType::kI64: store(static_cast<std::int64_t>(value)); break;
    case DType::kU8: store(static_cast<std::uint8_t>(value)); break;
  }
}

double get_value(const std::byte* data, std::int64_t i, DType dtype) {
  const auto at = static_cast<std::size_t>(i) * dtype_size(dtype);
  auto load = [&](auto typed) {
    std::memcpy(&typed, data + at, sizeof(typed));
    return typed;
  };
  switch (dtype) {
    case DType::kF32: return static_cast<double>(load(float{}));
    case DType::kF64: return load(double{});
    case DType::kF16: return static_cast<double>(f16_to_float(load(std::uint16_t{})));
    case DType::kBF16: return static_cast<double>(bf16_to_float(load(std::uint16_t{})));
    case DType::kI32: return static_cast<double>(load(std::int32_t{}));
    case DType::kI64: return static_cast<double>(load(std::int64_t{}));
    case DType::kU8: return static_cast<double>(load(std::uint8_t{}));
  }
  return 0.0;
}

// The single algorithm of the collectives other than allreduce.
std::string fixed_algorithm(std::string_view op) {
  if (op == "broadcast" || op == "reduce" || op == "scatter" || op == "gather") return "binomial";
  if (op == "alltoall") return "pairwise";
  return "ring";
}

// Ops whose nccl-tests size is P blocks of `block` elements (the large side of the call).
bool blocked(std::string_view op) {
  return op == "allgather" || op == "reduce_scatter" || op == "scatter" || op == "gather" ||
         op == "alltoall";
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::vector<std::string> allreduce_names() {
  std::vector<std::string> names;
  for (const auto& algorithm : allreduce_algorithms()) names.emplace_back(algorithm.name);
  return names;
}

const std::vector<std::string>& transport_names() {
  static const std::vector<std::string> names = {"inproc", "mpi"};
  return names;
}

// The buffers of one call on one rank: `size` bytes in the nccl-tests sense (see the row).
struct Buffers {
  std::int64_t count = 0;  // elements of the row's size
  std::int64_t block = 0;  // elements per rank's block (blocked ops), else count
  std::vector<std::byte> input;
  std::vector<std::byte> output;  // all but allreduce and broadcast (in place)
};

Buffers make_buffers(std::string_view op, std::int64_t size, DType dtype, int ranks) {
  const auto element = static_cast<std::int64_t>(dtype_size(dtype));
  const auto p = static_cast<std::int64_t>(ranks);
  Buffers b;
  b.count = std::max<std::int64_t>(1, size / element);
  b.block = b.count;
  if (blocked(op)) {
    b.block = std::max<std::int64_t>(1, b.count / p);
    b.count = b.block * p;
  }
  const auto bytes = [&](std::int64_t n) { return static_cast<std::size_t>(n * element); };
  if (op == "allgather" || op == "gather") {
    b.input.resize(bytes(b.block));
    b.output.resize(bytes(b.count));
  } else if (op == "reduce_scatter" || op == "scatter") {
    b.input.resize(bytes(b.count));
    b.output.resize(bytes(b.block));
  } else if (op == "alltoall" || op == "reduce") {
    b.input.resize(bytes(b.count));
    b.output.resize(bytes(b.count));
  } else {
    b.input.resize(bytes(b.count));
  }
  return b;
}

void call_op(Communicator& comm, std::string_view op, Buffers& b, DType dtype,
             const CollectiveOptions& call) {
  if (op == "allreduce") {
    comm.allreduce(b.input.data(), b.count, dtype, ReduceOp::kSum, call);
  } else if (op == "broadcast") {
    comm.broadcast(b.input.data(), b.count, dtype, 0, call);
  } else if (op == "allgather") {
    comm.allgather(b.input.data(), b.output.data(), b.block, dtype, call);
  } else if (op == "reduce_scatter") {
    comm.reduce_scatter(b.input.data(), b.output.data(), b.block, dtype, ReduceOp::kSum, call);
  } else if (op == "reduce") {
    comm.reduce(b.input.data(), b.output.data(), b.count, dtype, ReduceOp::kSum, 0, call);
  } else if (op == "scatter") {
    comm.scatter(b.input.data(), b.output.data(), b.block, dtype, 0, call);
  } else if (op == "gather") {
    comm.gather(b.input.data(), b.output.data(), b.block, dtype, 0, call);
  } else {
    comm.alltoall(b.input.data(), b.output.data(), b.block, dtype, call);
  }
}

// One call on known small integers, compared with the closed form; true on every rank only if it
// matched on every rank. Values stay <= P(P+1)/2 + 4P (200 at P = 16): exact in u8 and bf16.
bool check_once(Communicator& comm, std::string_view op, Buffers& b, DType dtype,
                const CollectiveOptions& call) {
  const int r = comm.rank();
  const double p = comm.size();
  const double rank_sum = p * (p + 1) / 2;  // sum over ranks of (r + 1)
  bool ok = true;
  if (op == "allreduce") {
    for (std::int64_t i = 0; i < b.count; ++i) put_value(b.input.data(), i, dtype, r + 1 + i % 5);
    call_op(comm, op, b, dtype, call);
    for (std::int64_t i = 0; i < b.count && ok; ++i)
      ok = get_value(b.input.data(), i, dtype) == rank_sum + p * static_cast<double>(i % 5);
  } else if (op == "broadcast") {
    for (std::int64_t i = 0; i < b.count; ++i)
      put_value(b.input.data(), i, dtype, r == 0 ? 1 + i % 5 : 0);
    call_op(comm, op, b, dtype, call);
    for (std::int64_t i = 0; i < b.count && ok; ++i)
      ok = get_value(b.input.data(), i, dtype) == static_cast<double>(1 + i % 5);
  } else if (op == "allgather") {
    for (std::int64_t i = 0; i < b.block; ++i) put_value(b.input.data(), i, dtype, (r + i) % 7);
    call_op(comm, op, b, dtype, call);
    for (std::int64_t j = 0; j < b.count && ok; ++j)
      ok = get_value(b.output.data(), j, dtype) ==
           static_cast<double>((j / b.block + j % b.block) % 7);
  } else if (op == "reduce_scatter") {
    for (std::int64_t j = 0; j < b.count; ++j) put_value(b.input.data(), j, dtype, r + 1 + j % 5);
    call_op(comm, op, b, dtype, call);
    for (std::int64_t i = 0; i < b.block && ok; ++i) {
      const std::int64_t j = r * b.block + i;
      ok = get_value(b.output.data(), i, dtype) == rank_sum + p * static_cast<double>(j % 5);
    }
  } else if (op == "reduce") {
    for (std::int64_t i = 0; i < b.count; ++i) put_value(b.input.data(), i, dtype, r + 1 + i % 5);
    call_op(comm, op, b, dtype, call);
    for (std::int64_t i = 0; r == 0 && i < b.count && ok; ++i)
      ok = get_value(b.output.data(), i, dtype) == rank_sum + p * static_cast<double>(i % 5);
  } else if (op == "scatter") {
    // Root's block d, element i: (d + i) % 7, which rank d receives.
    for (std::int64_t j = 0; j < b.count; ++j)
      put_value(b.input.data(), j, dtype, r == 0 ? (j / b.block + j % b.block) % 7 : 0);
    call_op(comm, op, b, dtype, call);
    for (std::int64_t i = 0; i < b.block && ok; ++i)
      ok = get_value(b.output.data(), i, dtype) == static_cast<double>((r + i) % 7);
  } else if (op == "gather") {
    for (std::int64_t i = 0; i < b.block; ++i) put_value(b.input.data(), i, dtype, (r + i) % 7);
    call_op(comm, op, b, dtype, call);
    for (std::int64_t j = 0; r == 0 && j < b.count && ok; ++j)
      ok = get_value(b.output.data(), j, dtype) ==
           static_cast<double>((j / b.block + j % b.block) % 7);
  } else {
    // alltoall: rank r's block d, element i = (r + 2 d + i) % 7 lands in block r of rank d.
    for (std::int64_t j = 0; j < b.count; ++j)
      put_value(b.input.data(), j, dtype, (r + 2 * (j / b.block) + j % b.block) % 7);
    call_op(comm, op, b, dtype, call);
    for (std::int64_t j = 0; j < b.count && ok; ++j)
      ok = get_value(b.output.data(), j, dtype) ==
           static_cast<double>((j / b.block + 2 * r + j % b.block) % 7);
  }
  std::int32_t flag = ok ? 1 : 0;
  comm.allreduce(&flag, 1, DType::kI32, ReduceOp::kMin);
  return flag == 1;
}

// Max over ranks of a per-rank figure.
double max_over_ranks(Communicator& comm, double value) {
  comm.allreduce(&value, 1, DType::kF64, ReduceOp::kMax);
  return value;
}

// All sizes of one (op, algorithm, P) in one world; rank 0 reports the rows.
void run_configuration(const CollectiveBenchmarkOptions& options, const std::string& op,
                       const std::string& algorithm, int ranks,
                       const std::function<void(const CollectiveBenchmarkRow&)>& report) {
  CommOptions comm_options;
  comm_options.check_headers = false;
  comm_options.segment_bytes = options.segment_bytes;
  comm_options.timeout_setting = "DTRAIN_COMM_TIMEOUT_MS";
  const std::function<void(Communicator&)> body = [&](Communicator& comm) {
    CollectiveOptions call;
    call.algorithm = algorithm;
    for (std::int64_t size : options.sizes) {
      Buffers b = make_buffers(op, size, options.dtype, ranks);
      const bool correct =
          !options.check_correctness || check_once(comm, op, b, options.dtype, call);
      // Zeros for the timed calls: repeated sums stay finite and cost what real data costs.
      std::fill(b.input.begin(), b.input.end(), std::byte{0});
      std::fill(b.output.begin(), b.output.end(), std::byte{0});

      const int probes = std::max(1, options.warmup);
      comm.barrier();
      Stopwatch probe;
      for (int i = 0; i < probes; ++i) call_op(comm, op, b, options.dtype, call);
      const double probe_seconds = max_over_ranks(comm, probe.seconds() / probes);
      // Small sizes also warm up for warmup_seconds: 5 calls of a few microseconds end before the
      // freshly started (or freshly pinned) rank threads run at speed, and the first size of a
      // configuration measured up to 1.6x slow. The count comes from the agreed probe time, so
      // every rank makes the same number of calls.
      const auto more_warmup = static_cast<std::int64_t>(
          std::min(options.warmup_seconds / std::max(probe_seconds, 1e-9) - probes, 1e6));
      for (std::int64_t i = 0; i < more_warmup; ++i) call_op(comm, op, b, options.dtype, call);
      std::int64_t iterations = options.iterations;
      if (iterations <= 0) {
        const double wanted = options.target_seconds / std::max(probe_seconds, 1e-9);
        iterations = std::clamp(static_cast<std::int64_t>(std::min(wanted, 1e12)),
                                options.min_iterations, options.max_iterations);
      }

      comm.barrier();
      Stopwatch watch;
      for (std::int64_t i = 0; i < iterations; ++i) call_op(comm, op, b, options.dtype, call);
      const double seconds =
          max_over_ranks(comm, watch.seconds() / static_cast<double>(iterations));
      if (comm.rank() != 0) continue;

      CollectiveBenchmarkRow row;
      row.op = op;
      row.algorithm = algorithm.empty() ? fixed_algorithm(op) : algorithm;
      row.transport = options.transport;
      row.ranks = ranks;
      row.count = b.count;
      row.size = b.count * static_cast<std::int64_t>(dtype_size(options.dtype));
      row.dtype = std::string(dtype_name(options.dtype));
      row.iterations = iterations;
      row.time_us = seconds * 1e6;
      row.algbw = static_cast<double>(row.size) / seconds / 1e9;
      row.busbw = row.algbw * bus_bandwidth_factor(op, ranks);
      row.correct = correct;
      report(row);
    }
  };
  if (options.transport == "mpi") {
    Communicator comm(mpi_world_transport(), comm_options);
    body(comm);
  } else {
    spawn_ranks(ranks, body, comm_options,
                options.pin_ranks ? RankPinning::kWhenRanksFit : RankPinning::kFromEnvironment);
  }
}

}  // namespace

std::vector<std::int64_t> default_benchmark_sizes() {
  std::vector<std::int64_t> sizes;
  for (std::int64_t size = 4; size <= (std::int64_t{256} << 20); size *= 4) sizes.push_back(size);
  return sizes;
}

const std::vector<std::string>& benchmark_ops() {
  static const std::vector<std::string> ops = {"allreduce",      "broadcast", "reduce", "allgather",
                                               "reduce_scatter", "scatter",   "gather", "alltoall"};
  return ops;
}

double bus_bandwidth_factor(std::string_view op, int ranks) {
  const double p = ranks;
  if (op == "allreduce") return 2 * (p - 1) / p;
  // nccl-tests: the data every rank must send or receive over its link, per byte of `size`.
  if (blocked(op)) return (p - 1) / p;
  if (op == "broadcast" || op == "reduce") return 1.0;
  throw ConfigError(fmt::format("collective benchmark: unknown op '{}'; accepted: {}", op,
                                join(benchmark_ops())));
}

void validate_collective_benchmark_options(const CollectiveBenchmarkOptions& options) {
  for (const auto& op : options.ops) {
    if (std::find(benchmark_ops().begin(), benchmark_ops().end(), op) == benchmark_ops().end()) {
      throw ConfigError(fmt::format("collective benchmark: unknown op '{}'; accepted: {}", op,
                                    join(benchmark_ops())));
    }
  }
  if (std::find(transport_names().begin(), transport_names().end(), options.transport) ==
      transport_names().end()) {
    throw ConfigError(fmt::format("collective benchmark: unknown transport '{}'; accepted: {}",
                                  options.transport, join(transport_names())));
  }
  if (options.transport == "mpi" && !launched_by_mpirun()) {
    throw ConfigError(
        "collective benchmark: transport 'mpi' runs on the processes of an MPI job; start it "
        "with `mpirun -np N dtrain bench collectives ...` (or srun --mpi=pmix)");
  }
  const auto names = default_benchmark_algorithms(options.transport);
  for (const auto& algorithm : options.algorithms) {
    if (std::find(names.begin(), names.end(), algorithm) == names.end()) {
      throw ConfigError(fmt::format(
          "collective benchmark: unknown allreduce algorithm '{}' for transport {}; accepted: {}",
          algorithm, options.transport, join(names)));
    }
  }
  if (options.segment_bytes == 0) {
    throw ConfigError("collective benchmark: segment size 0 is not >= 1 byte");
  }
  for (int p : options.ranks) {
    if (p < 1 || p > kMaxBenchmarkRanks) {
      throw ConfigError(
          fmt::format("collective benchmark: ranks {} is not in [1, {}]", p, kMaxBenchmarkRanks));
    }
  }
  const auto element = static_cast<std::int64_t>(dtype_size(options.dtype));
  for (auto size : options.sizes) {
    if (size < 1) throw ConfigError(fmt::format("collective benchmark: size {} is not >= 1", size));
    // Rounding would silently measure another size (1, 3 and 5 bytes all as one f32).
    if (size % element != 0) {
      throw ConfigError(fmt::format(
          "collective benchmark: size {} bytes is not a whole number of {} elements ({} bytes "
          "each); give multiples of {}",
          size, dtype_name(options.dtype), element, element));
    }
  }
  // Each rank holds up to 3 buffers of `size` bytes (input, output, the algorithm's scratch);
  // inproc ranks share this process. Refused up front rather than failing with bad_alloc.
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_bytes > 0 && !options.sizes.empty() && !options.ranks.empty()) {
    const double memory = static_cast<double>(pages) * static_cast<double>(page_bytes);
    const auto largest = *std::max_element(options.sizes.begin(), options.sizes.end());
    const int ranks = options.transport == "mpi"
                          ? 1
                          : *std::max_element(options.ranks.begin(), options.ranks.end());
    const double needed = 3.0 * static_cast<double>(largest) * static_cast<double>(ranks);
    if (needed > memory) {
      throw ConfigError(fmt::format(
          "collective benchmark: size {} bytes per rank needs about {:.1f} GiB for {} rank(s) in "
          "this process (3 buffers each), more than this machine's {:.1f} GiB; give smaller "
          "--sizes or fewer --ranks",
          largest, needed / 1073741824.0, ranks, memory / 1073741824.0));
    }
  }
  if (options.min_iterations < 1 || options.max_iterations < options.min_iterations) {
    throw ConfigError(fmt::format("collective benchmark: iteration bounds [{}, {}] are not valid",
                                  options.min_iterations, options.max_iterations));
  }
}

std::vector<std::string> default_benchmark_algorithms(std::string_view transport) {
  std::vector<std::string> names;
  for (const auto& name : allreduce_names()) {
    if (name == kNativeAllreduce && transport != "mpi") continue;
    names.push_back(name);
  }
  return names;
}

void fit_line(const std::vector<double>& x, const std::vector<double>& y, double& alpha,
              double& beta) {
  DTRAIN_CHECK_EQ(x.size(), y.size());
  alpha = beta = 0.0;
  if (x.empty()) return;
  const auto n = static_cast<double>(x.size());
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    mx += x[i] / n;
    my += y[i] / n;
  }
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  beta = sxx > 0 ? sxy / sxx : 0.0;
  alpha = my - beta * mx;
  // A latency or a cost per byte below zero has no meaning (noise at the small sizes can tilt
  // the line): fit the other parameter alone with that one at zero (non-negative least squares).
  if (alpha < 0.0) {
    double xx = 0, xy = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      xx += x[i] * x[i];
      xy += x[i] * y[i];
    }
    alpha = 0.0;
    beta = xx > 0 ? std::max(0.0, xy / xx) : 0.0;
  } else if (beta < 0.0) {
    beta = 0.0;
    alpha = my;
  }
}

std::vector<AlphaBetaFit> fit_alpha_beta(const std::vector<CollectiveBenchmarkRow>& rows) {
  std::vector<AlphaBetaFit> fits;
  std::vector<std::vector<double>> xs, ys;
  for (const auto& row : rows) {
    auto it = std::find_if(fits.begin(), fits.end(), [&](const AlphaBetaFit& f) {
      return f.op == row.op && f.algorithm == row.algorithm && f.transport == row.transport &&
             f.ranks == row.ranks;
    });
    if (it == fits.end()) {
      fits.push_back({row.op, row.algorithm, row.transport, row.ranks, 0, 0.0, 0.0});
      xs.emplace_back();
      ys.emplace_back();
      it = fits.end() - 1;
    }
    const auto k = static_cast<std::size_t>(it - fits.begin());
    xs[k].push_back(static_cast<double>(row.size));
    ys[k].push_back(row.time_us);
    ++it->points;
  }
  for (std::size_t k = 0; k < fits.size(); ++k)
    fit_line(xs[k], ys[k], fits[k].alpha_us, fits[k].beta_us_per_byte);
  return fits;
}

std::vector<CollectiveBenchmarkRow> run_collective_benchmark(
    const CollectiveBenchmarkOptions& options,
    const std::function<void(const CollectiveBenchmarkRow&)>& on_row) {
  validate_collective_benchmark_options(options);
  std::vector<CollectiveBenchmarkRow> rows;
  const auto report = [&](const CollectiveBenchmarkRow& row) {
    rows.push_back(row);
    if (on_row) on_row(row);
  };
  if (options.transport == "mpi") {
    const int world = mpi_world_size();
    if (options.ranks != std::vector<int>{world}) {
      std::string given;
      for (int p : options.ranks) given += fmt::format("{}{}", given.empty() ? "" : ",", p);
      throw ConfigError(fmt::format(
          "collective benchmark: ranks {} under MPI: the ranks are the {} processes of this job "
          "(mpirun -np {}); give --ranks {} or leave it out",
          given, world, world, world));
    }
  }
  const std::vector<std::string> algorithms = options.algorithms.empty()
                                                  ? default_benchmark_algorithms(options.transport)
                                                  : options.algorithms;
  for (const auto& op : options.ops) {
    for (const auto& algorithm :
         op == "allreduce" ? algorithms : std::vector<std::string>{std::string()}) {
      for (int ranks : options.ranks) run_configuration(options, op, algorithm, ranks, report);
    }
  }
  return rows;
}

}  // namespace dtrain::experiments
