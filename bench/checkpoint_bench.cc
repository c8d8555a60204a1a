// What one checkpoint costs the training thread, per tier (docs/FAULTS.md, "Two tiers"), for a
// checkpoint of the fortunes GPT's size (842,496 parameters and AdamW's two moments: 9.7 MB):
//   BM_MemoryTier    MemoryCheckpoint::save: encode into a mapped slot (one copy + CRC-32)
//   BM_Encode        encode_checkpoint into a new string (what the disk tier's writer thread does
//                    first)
//   BM_DiskTier      write_checkpoint to a file (encode + write + fsync + rename), the writer
//                    thread's whole job
//   BM_Crc32         the CRC-32 pass alone, and BM_Memcpy one copy of the bytes: the bound of a
//                    save is their sum
// Run: build/bench/checkpoint_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <isa-l/crc.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dtrain/base/allocator_tuning.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/memory_checkpoint.h"

namespace {

namespace fs = std::filesystem;
using dtrain::train::Checkpoint;

constexpr std::size_t kParams = 842496;  // the fortunes GPT (docs/TRANSFORMER.md)

Checkpoint gpt_sized_checkpoint() {
  Checkpoint c;
  c.sampler_epoch = 0;
  c.sampler_position = 32;
  c.global_step = 10;
  c.scalars = {{"train_seconds", 1.0}, {"samples", 320.0}};
  c.params.assign(kParams, 0.5f);
  c.optimizer_state.push_back({"adamw.m", std::vector<float>(kParams, 0.25f)});
  c.optimizer_state.push_back({"adamw.v", std::vector<float>(kParams, 0.125f)});
  return c;
}

void set_bytes(benchmark::State& state, std::size_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
}

fs::path scratch(const char* name) {
  const fs::path folder = fs::temp_directory_path() / (std::string("dtrain_checkpoint_bench_") +
                                                       name + "_" + std::to_string(::getpid()));
  fs::create_directories(folder);
  return folder;
}

void BM_MemoryTier(benchmark::State& state) {
  dtrain::tune_allocator_for_training();
  const Checkpoint c = gpt_sized_checkpoint();
  const fs::path folder = scratch("memory");
  dtrain::train::MemoryCheckpoint memory((folder / "run").string(), folder.string());
  memory.save(c);  // the file is made and both slots' pages mapped once, as in a run
  memory.save(c);
  for (auto _ : state) memory.save(c);
  set_bytes(state, dtrain::train::encoded_checkpoint_size(c));
  memory.remove();
  fs::remove_all(folder);
}
BENCHMARK(BM_MemoryTier)->Unit(benchmark::kMillisecond);

void BM_Encode(benchmark::State& state) {
  dtrain::tune_allocator_for_training();
  const Checkpoint c = gpt_sized_checkpoint();
  for (auto _ : state) benchmark::DoNotOptimize(dtrain::train::encode_checkpoint(c));
  set_bytes(state, dtrain::train::encoded_checkpoint_size(c));
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond);

void BM_DiskTier(benchmark::State& state) {
  dtrain::tune_allocator_for_training();
  const Checkpoint c = gpt_sized_checkpoint();
  const fs::path folder = scratch("disk");
  for (auto _ : state) dtrain::train::write_checkpoint((folder / "c.ckpt").string(), c);
  set_bytes(state, dtrain::train::encoded_checkpoint_size(c));
  fs::remove_all(folder);
}
BENCHMARK(BM_DiskTier)->Unit(benchmark::kMillisecond);

void BM_Crc32(benchmark::State& state) {
  const std::vector<char> bytes(dtrain::train::encoded_checkpoint_size(gpt_sized_checkpoint()), 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
  }
  set_bytes(state, bytes.size());
}
BENCHMARK(BM_Crc32)->Unit(benchmark::kMillisecond);

// The checksum the checkpoints use (checkpoint.cc): ISA-L's, the same values as zlib's above.
void BM_Crc32Isal(benchmark::State& state) {
  const std::vector<char> bytes(dtrain::train::encoded_checkpoint_size(gpt_sized_checkpoint()), 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        crc32_gzip_refl(0, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()));
  }
  set_bytes(state, bytes.size());
}
BENCHMARK(BM_Crc32Isal)->Unit(benchmark::kMillisecond);

void BM_Memcpy(benchmark::State& state) {
  const std::vector<char> from(dtrain::train::encoded_checkpoint_size(gpt_sized_checkpoint()), 1);
  std::vector<char> to(from.size());
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), from.size());
    benchmark::ClobberMemory();
  }
  set_bytes(state, from.size());
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond);

}  // namespace
