// Checkpoint files: exact round trip, and every kind of damage a CheckpointError naming the file.
#include "dtrain/train/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "dtrain/base/error.h"
#include "dtrain/train/atomic_file.h"
#include "temp_dir.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using dtrain::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A store shaped like a tiny model: two parameters and one buffer.
nn::ParamStore make_store(std::int64_t hidden = 3) {
  nn::ParamStore store;
  store.add_param("fc1.weight", {hidden, 4}, true);
  store.add_param("fc1.bias", {hidden}, false);
  store.add_buffer("bn.running_mean", {hidden});
  store.finalize();
  for (std::int64_t i = 0; i < store.num_params(); ++i) store.params()[i] = 0.5f * i - 1.0f;
  for (std::int64_t i = 0; i < store.num_buffer_elements(); ++i) store.buffers()[i] = 0.25f * i;
  return store;
}

Checkpoint make_checkpoint(const nn::ParamStore& store) {
  Checkpoint c;
  c.epoch = 3;
  c.global_step = 1407;
  c.optimizer_steps = 1407;
  c.seed = 0xdeadbeefcafeULL;
  c.sampler_epoch = 3;
  c.sampler_position = 0;
  c.scalars = {{"train_seconds", 12.5}, {"tta:0.85", -1.0}};
  capture_from(store, c);
  NamedValues momentum{"sgd.momentum", {}};
  for (std::int64_t i = 0; i < store.num_params(); ++i) momentum.values.push_back(0.001f * i);
  c.optimizer_state.push_back(momentum);
  return c;
}

void expect_equal(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.global_step, b.global_step);
  EXPECT_EQ(a.optimizer_steps, b.optimizer_steps);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.sampler_epoch, b.sampler_epoch);
  EXPECT_EQ(a.sampler_position, b.sampler_position);
  EXPECT_EQ(a.scalars, b.scalars);
  ASSERT_EQ(a.param_table.size(), b.param_table.size());
  for (std::size_t i = 0; i < a.param_table.size(); ++i) {
    EXPECT_EQ(a.param_table[i].name, b.param_table[i].name);
    EXPECT_EQ(a.param_table[i].shape, b.param_table[i].shape);
    EXPECT_EQ(a.param_table[i].offset, b.param_table[i].offset);
    EXPECT_EQ(a.param_table[i].numel, b.param_table[i].numel);
    EXPECT_EQ(a.param_table[i].weight_decay, b.param_table[i].weight_decay);
  }
  EXPECT_EQ(a.buffer_table.size(), b.buffer_table.size());
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.buffers, b.buffers);
  EXPECT_EQ(a.optimizer_state, b.optimizer_state);
}

template <typename Fn>
std::string checkpoint_error(Fn&& fn) {
  try {
    fn();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a CheckpointError";
  return "";
}

TEST(Checkpoint, RoundTripThroughAFile) {
  TempDir dir;
  nn::ParamStore store = make_store();
  const Checkpoint saved = make_checkpoint(store);
  write_checkpoint(dir.file("a.ckpt"), saved);
  EXPECT_FALSE(fs::exists(dir.file("a.ckpt.tmp")));
  const Checkpoint loaded = read_checkpoint(dir.file("a.ckpt"));
  expect_equal(saved, loaded);
  EXPECT_DOUBLE_EQ(loaded.scalar("train_seconds", 0.0), 12.5);
  EXPECT_DOUBLE_EQ(loaded.scalar("absent", 7.0), 7.0);

  nn::ParamStore other = make_store();
  std::fill(other.params(), other.params() + other.num_params(), 0.0f);
  restore_into(loaded, other, "a.ckpt");
  EXPECT_TRUE(std::equal(store.params(), store.params() + store.num_params(), other.params()));
  EXPECT_TRUE(
      std::equal(store.buffers(), store.buffers() + store.num_buffer_elements(), other.buffers()));
}

TEST(Checkpoint, HeaderLayoutIsAsDocumented) {
  nn::ParamStore store = make_store();
  const std::string bytes = encode_checkpoint(make_checkpoint(store));
  EXPECT_EQ(bytes.substr(0, 8), "DTRAINCK");
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]), kCheckpointVersion);  // little-endian u32
  std::uint64_t payload = 0;
  for (int i = 0; i < 8; ++i) {
    payload |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[16 + i])) << (8 * i);
  }
  EXPECT_EQ(payload + 28, bytes.size());
}

TEST(Checkpoint, EveryTruncationIsRejected) {
  nn::ParamStore store = make_store();
  const std::string bytes = encode_checkpoint(make_checkpoint(store));
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    const std::string message =
        checkpoint_error([&] { decode_checkpoint(bytes.substr(0, length), "cut.ckpt"); });
    EXPECT_THAT(message, HasSubstr("cut.ckpt")) << "length " << length;
  }
  EXPECT_THAT(checkpoint_error([&] { decode_checkpoint(bytes.substr(0, 100), "cut.ckpt"); }),
              HasSubstr("truncated"));
}

TEST(Checkpoint, EveryFlippedByteIsRejected) {
  nn::ParamStore store = make_store();
  const std::string bytes = encode_checkpoint(make_checkpoint(store));
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x10);
    const std::string message = checkpoint_error([&] { decode_checkpoint(damaged, "flip.ckpt"); });
    EXPECT_THAT(message, HasSubstr("flip.ckpt")) << "byte " << i;
  }
  std::string damaged = bytes;
  damaged[200] = static_cast<char>(damaged[200] ^ 1);
  EXPECT_THAT(checkpoint_error([&] { decode_checkpoint(damaged, "flip.ckpt"); }),
              HasSubstr("corrupt: CRC-32"));
}

// The supervisor's read (Keep::kNoFloats): the same checks and fields, no copy of the floats.
TEST(Checkpoint, AReadWithoutFloatsChecksAllAndKeepsAllButTheFloats) {
  nn::ParamStore store = make_store();
  const Checkpoint saved = make_checkpoint(store);
  const std::string bytes = encode_checkpoint(saved);
  Checkpoint expected = saved;
  expected.params.clear();
  expected.buffers.clear();
  for (auto& state : expected.optimizer_state) state.values.clear();
  expect_equal(expected, decode_checkpoint(bytes, "a.ckpt", Keep::kNoFloats));
  for (std::size_t i = 0; i < bytes.size(); i += 7) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x10);
    EXPECT_THAT(checkpoint_error([&] { decode_checkpoint(damaged, "flip.ckpt", Keep::kNoFloats); }),
                HasSubstr("flip.ckpt"))
        << "byte " << i;
    EXPECT_THAT(checkpoint_error(
                    [&] { decode_checkpoint(bytes.substr(0, i), "cut.ckpt", Keep::kNoFloats); }),
                HasSubstr("cut.ckpt"))
        << "length " << i;
  }
}

TEST(Checkpoint, WrongMagicAndVersion) {
  nn::ParamStore store = make_store();
  std::string bytes = encode_checkpoint(make_checkpoint(store));
  std::string wrong_magic = bytes;
  wrong_magic[0] = 'X';
  EXPECT_THAT(checkpoint_error([&] { decode_checkpoint(wrong_magic, "m.ckpt"); }),
              HasSubstr("m.ckpt is not a dtrain checkpoint"));
  std::string wrong_version = bytes;
  wrong_version[8] = 2;
  EXPECT_THAT(checkpoint_error([&] { decode_checkpoint(wrong_version, "v.ckpt"); }),
              HasSubstr("format version 2; this dtrain reads version 1"));
  EXPECT_THAT(checkpoint_error([&] { decode_checkpoint(bytes + "x", "t.ckpt"); }),
              HasSubstr("trailing bytes"));
}

TEST(Checkpoint, HugeClaimedCountIsRejectedBeforeAllocating) {
  // A payload whose parameter count claims 2^60 floats, with a valid checksum: the reader must
  // refuse it from the bytes left, not try to allocate 4 EiB.
  Checkpoint c;
  std::string bytes = encode_checkpoint(c);
  // Empty checkpoint payload: 6 x 8 counters, u32 scalars, two u32 tables, then i64 params count.
  const std::size_t params_count_at = 24 + 48 + 4 + 4 + 4;
  for (int i = 0; i < 8; ++i) bytes[params_count_at + i] = 0;
  bytes[params_count_at + 7] = 0x10;
  // Recompute the CRC so that only the count is wrong.
  const std::size_t crc_at = bytes.size() - 4;
  const auto crc = static_cast<std::uint32_t>(
      crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), crc_at));
  for (int i = 0; i < 4; ++i) bytes[crc_at + i] = static_cast<char>(crc >> (8 * i));
  EXPECT_THAT(checkpoint_error([&] { decode_checkpoint(bytes, "huge.ckpt"); }),
              AllOf(HasSubstr("huge.ckpt is malformed"), HasSubstr("parameters claims")));
}

// The trailer is zlib's CRC-32 of the bytes before it (computed by ISA-L since 2026-11-27):
// files written before and after read alike, and any tool with zlib can check one.
TEST(Checkpoint, TrailerIsZlibsCrc32OfTheBytesBeforeIt) {
  nn::ParamStore store = make_store(3);
  Checkpoint c = make_checkpoint(store);
  // Odd sizes, so that the checksum's folding meets a tail of every length.
  for (int n = 0; n < 67; ++n)
    c.optimizer_state.push_back(
        {fmt::format("s{}", n),
         std::vector<float>(static_cast<std::size_t>(n * 997 + 1), 0.25f * n)});
  const std::string bytes = encode_checkpoint(c);
  const std::size_t crc_at = bytes.size() - 4;
  const auto zlib = static_cast<std::uint32_t>(
      crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), crc_at));
  std::uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) {
    stored |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[crc_at + i])) << (8 * i);
  }
  EXPECT_EQ(stored, zlib);
  EXPECT_NO_THROW(decode_checkpoint(bytes, "crc.ckpt"));
}

TEST(Checkpoint, MismatchedModelNamesTheFirstDifferingTensor) {
  nn::ParamStore store = make_store(3);
  const Checkpoint saved = make_checkpoint(store);
  nn::ParamStore wider = make_store(5);
  EXPECT_THAT(checkpoint_error([&] { check_layout(saved, wider, "w.ckpt"); }),
              AllOf(HasSubstr("checkpoint w.ckpt does not match the model"),
                    HasSubstr("'fc1.weight' [3, 4] at offset 0 in the checkpoint"),
                    HasSubstr("'fc1.weight' [5, 4] at offset 0 in the model")));

  nn::ParamStore longer;
  longer.add_param("fc1.weight", {3, 4}, true);
  longer.add_param("fc1.bias", {3}, false);
  longer.add_param("fc2.weight", {2, 3}, true);
  longer.add_buffer("bn.running_mean", {3});
  longer.finalize();
  EXPECT_THAT(checkpoint_error([&] { check_layout(saved, longer, "l.ckpt"); }),
              AllOf(HasSubstr("2 parameter tensors, the model 3"), HasSubstr("'fc2.weight'"),
                    HasSubstr("only in the model")));
  nn::ParamStore target = make_store(5);
  EXPECT_THROW(restore_into(saved, target, "w.ckpt"), CheckpointError);
}

TEST(Checkpoint, MissingFile) {
  EXPECT_THAT(checkpoint_error([] { read_checkpoint("/nonexistent/dtrain/x.ckpt"); }),
              HasSubstr("/nonexistent/dtrain/x.ckpt"));
}

TEST(Checkpoint, FailedWriteLeavesThePreviousFileIntact) {
  TempDir dir;
  nn::ParamStore store = make_store();
  const Checkpoint first = make_checkpoint(store);
  const std::string path = dir.file("run.ckpt");
  write_checkpoint(path, first);
  const std::string before = read_whole_file(path);

  // Block the temporary file's name with a folder: the write fails before touching `path`.
  fs::create_directories(path + ".tmp");
  Checkpoint second = first;
  second.epoch = 4;
  second.params.assign(second.params.size(), 9.0f);
  EXPECT_THAT(checkpoint_error([&] { write_checkpoint(path, second); }),
              AllOf(HasSubstr(path), HasSubstr("unchanged")));
  EXPECT_EQ(read_whole_file(path), before);
  expect_equal(read_checkpoint(path), first);

  // Once the obstacle is gone the same write succeeds and replaces the file.
  fs::remove_all(path + ".tmp");
  write_checkpoint(path, second);
  EXPECT_EQ(read_checkpoint(path).epoch, 4);
}

// CheckpointDir (names, order, pruning, the newest good checkpoint): checkpoint_dir_test.cc.

}  // namespace
}  // namespace dtrain::train
