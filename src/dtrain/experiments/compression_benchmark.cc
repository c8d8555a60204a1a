#include "dtrain/experiments/compression_benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"
#include "dtrain/compress/codec_spec.h"
#include "dtrain/compress/powersgd.h"

namespace dtrain::experiments {
namespace {

using Clock = std::chrono::steady_clock;

// Median seconds per call of `run`, over `repeats` runs of enough calls to last about 0.1 s.
template <typename Run>
double seconds_per_call(int repeats, Run&& run) {
  run();  // warm: page faults, caches
  const auto start = Clock::now();
  run();
  const double once = std::max(1e-7, std::chrono::duration<double>(Clock::now() - start).count());
  const int calls = std::max(1, static_cast<int>(0.1 / once));
  std::vector<double> per_call;
  for (int r = 0; r < repeats; ++r) {
    const auto begin = Clock::now();
    for (int c = 0; c < calls; ++c) run();
    per_call.push_back(std::chrono::duration<double>(Clock::now() - begin).count() / calls);
  }
  std::nth_element(per_call.begin(), per_call.begin() + repeats / 2, per_call.end());
  return per_call[static_cast<std::size_t>(repeats / 2)];
}

}  // namespace

void check_compression_benchmark(const std::vector<std::string>& codecs, std::int64_t elements,
                                 int repeats) {
  if (elements < 1) throw ConfigError(fmt::format("--elements {} is not >= 1", elements));
  if (repeats < 1) throw ConfigError(fmt::format("--repeats {} is not >= 1", repeats));
  for (const std::string& codec : codecs) compress::parse_codec(codec);
}

std::vector<CompressionBenchmarkRow> run_compression_benchmark(
    const std::vector<std::string>& codecs, std::int64_t elements, int repeats,
    const std::function<void(const CompressionBenchmarkRow&)>& on_row) {
  check_compression_benchmark(codecs, elements, repeats);
  const auto n = static_cast<std::size_t>(elements);
  // A gradient-like buffer: normal values of mixed scale.
  std::vector<float> x(n), out(n), copy(n);
  Rng rng(7);
  for (float& v : x) v = rng.normal() * 0.01f;
  std::vector<CompressionBenchmarkRow> rows;
  const auto emit = [&](CompressionBenchmarkRow row) {
    rows.push_back(row);
    if (on_row) on_row(row);
  };
  double memcpy_s =
      seconds_per_call(repeats, [&] { std::memcpy(copy.data(), x.data(), n * sizeof(float)); });
  emit({"memcpy", elements, memcpy_s * 1e3, 0.0, 4.0 * elements, 1.0, 1.0});
  for (const std::string& text : codecs) {
    const compress::CodecSpec spec = compress::parse_codec(text);
    CompressionBenchmarkRow row{spec.text(), elements};
    if (spec.kind == compress::CodecKind::kNone) continue;
    if (spec.kind == compress::CodecKind::kPowerSgd) {
      compress::PowerSgd power(elements, spec.rank, 1);
      row.encode_ms = 1e3 * seconds_per_call(repeats, [&] {
                        power.compute_p(x.data());
                        power.orthogonalize();
                        power.compute_q();
                      });
      row.decode_ms = 1e3 * seconds_per_call(repeats, [&] { power.decode(out.data()); });
      row.payload_bytes = 4.0 * static_cast<double>(power.p_count() + power.q_count());
    } else {
      const std::unique_ptr<compress::Codec> codec = compress::make_codec(spec);
      std::vector<std::uint8_t> payload(codec->encoded_bytes(elements));
      row.encode_ms = 1e3 * seconds_per_call(repeats, [&] {
                        codec->encode(x.data(), elements, payload.data(), 1);
                      });
      row.decode_ms = 1e3 * seconds_per_call(repeats, [&] {
                        codec->decode(payload.data(), elements, out.data(), 1);
                      });
      row.payload_bytes = static_cast<double>(payload.size());
    }
    row.ratio = 4.0 * static_cast<double>(elements) / row.payload_bytes;
    // memcpy again right after the codec: on a shared machine the load changes between rows, and
    // a ratio compares two timings taken under the same load.
    const double memcpy_now =
        seconds_per_call(repeats, [&] { std::memcpy(copy.data(), x.data(), n * sizeof(float)); });
    row.vs_memcpy = (row.encode_ms + row.decode_ms) / (0.5 * (memcpy_s + memcpy_now) * 1e3);
    memcpy_s = memcpy_now;
    emit(row);
  }
  return rows;
}

}  // namespace dtrain::experiments
