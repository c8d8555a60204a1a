#include "dtrain/train/checkpoint.h"

#include <fmt/format.h>
#include <isa-l/crc.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>

#include "dtrain/base/error.h"
#include "dtrain/train/atomic_file.h"

namespace dtrain::train {
namespace {

constexpr std::size_t kHeaderBytes = 24;  // magic, version, flags, payload size
constexpr std::size_t kTrailerBytes = 4;  // CRC-32
constexpr std::uint32_t kMaxDims = 16;

// CRC-32 (IEEE 802.3, reflected: zlib's crc32 and gzip's, the same values and chaining) by ISA-L,
// which folds with carry-less multiplies: 48.8 GB/s here against zlib's 4.3 GB/s (docs/FAULTS.md),
// 0.2 ms instead of 2.4 ms for the GPT's 10 MB checkpoint, paid on every memory-tier save.
std::uint32_t crc32_of(const char* data, std::size_t size) {
  return crc32_gzip_refl(0, reinterpret_cast<const unsigned char*>(data), size);
}

// Writes little-endian fields at `out`, or only counts their bytes when `out` is null (the sizing
// pass of encode_checkpoint_into: one pass to size, one to write, no reallocations). The CRC-32
// of what was written is kept as it goes, a chunk at a time right after its copy, while the chunk
// is still in cache: a second pass over the whole image would read it from memory again (measured
// on the GPT's 10 MB: 5.3 ms per save with the second pass, bench/checkpoint_bench.cc).
class Writer {
 public:
  explicit Writer(char* out) : out_(out) {}
  void raw(const void* data, std::size_t n) {
    if (out_ != nullptr) {
      constexpr std::size_t kChunk = std::size_t{64} << 10;
      const char* from = static_cast<const char*>(data);
      for (std::size_t done = 0; done < n;) {
        const std::size_t piece = std::min(kChunk, n - done);
        std::memcpy(out_ + size_ + done, from + done, piece);
        crc_ = crc32_gzip_refl(crc_, reinterpret_cast<const unsigned char*>(out_ + size_ + done),
                               piece);
        done += piece;
      }
    }
    size_ += n;
  }
  void u8(std::uint8_t v) { raw(&v, 1); }
  void u32(std::uint32_t v) {
    unsigned char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    raw(b, 4);
  }
  void u64(std::uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
    raw(b, 8);
  }
  void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
  void f64(double v) { u64(std::bit_cast<std::uint64_t>(v)); }
  void str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  void floats(const std::vector<float>& values) {
    if constexpr (std::endian::native == std::endian::little) {
      raw(values.data(), values.size() * sizeof(float));
    } else {
      for (float v : values) u32(std::bit_cast<std::uint32_t>(v));
    }
  }
  void table(const std::vector<nn::ParamEntry>& entries) {
    u32(static_cast<std::uint32_t>(entries.size()));
    for (const auto& entry : entries) {
      str(entry.name);
      u32(static_cast<std::uint32_t>(entry.shape.size()));
      for (auto dim : entry.shape) i64(dim);
      i64(entry.offset);
      i64(entry.numel);
      u8(entry.weight_decay ? 1 : 0);
    }
  }
  std::size_t size() const { return size_; }
  // CRC-32 (crc32_of's) of every byte written so far.
  std::uint32_t crc() const { return crc_; }

 private:
  char* out_;
  std::size_t size_ = 0;
  std::uint32_t crc_ = 0;
};

void write_payload(const Checkpoint& checkpoint, Writer& payload) {
  payload.i64(checkpoint.epoch);
  payload.i64(checkpoint.global_step);
  payload.i64(checkpoint.optimizer_steps);
  payload.u64(checkpoint.seed);
  payload.i64(checkpoint.sampler_epoch);
  payload.i64(checkpoint.sampler_position);
  payload.u32(static_cast<std::uint32_t>(checkpoint.scalars.size()));
  for (const auto& [name, value] : checkpoint.scalars) {
    payload.str(name);
    payload.f64(value);
  }
  payload.table(checkpoint.param_table);
  payload.table(checkpoint.buffer_table);
  payload.i64(static_cast<std::int64_t>(checkpoint.params.size()));
  payload.floats(checkpoint.params);
  payload.i64(static_cast<std::int64_t>(checkpoint.buffers.size()));
  payload.floats(checkpoint.buffers);
  payload.u32(static_cast<std::uint32_t>(checkpoint.optimizer_state.size()));
  for (const auto& state : checkpoint.optimizer_state) {
    payload.str(state.name);
    payload.i64(static_cast<std::int64_t>(state.values.size()));
    payload.floats(state.values);
  }
}

std::size_t payload_size_of(const Checkpoint& checkpoint) {
  Writer counter(nullptr);
  write_payload(checkpoint, counter);
  return counter.size();
}

// Reads little-endian fields from [begin, end) of a byte string, checking every length against
// what is left before reading or allocating.
class Reader {
 public:
  Reader(std::string_view bytes, std::size_t begin, std::size_t end, const std::string& source)
      : bytes_(bytes), pos_(begin), end_(end), source_(source) {}

  std::size_t left() const { return end_ - pos_; }
  std::size_t position() const { return pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw CheckpointError(
        fmt::format("checkpoint {} is malformed at byte {}: {}", source_, pos_, what));
  }
  void need(std::size_t n, const char* what) const {
    if (n > left()) fail(fmt::format("{} needs {} bytes, {} left", what, n, left()));
  }
  std::uint8_t u8(const char* what) {
    need(1, what);
    return static_cast<std::uint8_t>(bytes_[pos_++]);
  }
  std::uint32_t u32(const char* what) {
    need(4, what);
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(u8(what)) << (8 * i);
    return v;
  }
  std::uint64_t u64(const char* what) {
    need(8, what);
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(u8(what)) << (8 * i);
    return v;
  }
  std::int64_t i64(const char* what) { return static_cast<std::int64_t>(u64(what)); }
  double f64(const char* what) { return std::bit_cast<double>(u64(what)); }
  std::string str(const char* what) {
    const std::uint32_t size = u32(what);
    need(size, what);
    std::string s(bytes_.substr(pos_, size));
    pos_ += size;
    return s;
  }
  // A count of items of at least `min_item_bytes` each, rejected if the rest of the payload could
  // not hold them.
  std::uint64_t count(std::uint64_t n, std::size_t min_item_bytes, const char* what) const {
    if (n > left() / min_item_bytes) {
      fail(fmt::format("{} claims {} entries but only {} bytes are left", what, n, left()));
    }
    return n;
  }
  std::vector<float> floats(const char* what, Keep keep) {
    const std::int64_t n = i64(what);
    if (n < 0) fail(fmt::format("{} has a negative count {}", what, n));
    count(static_cast<std::uint64_t>(n), sizeof(float), what);
    if (keep == Keep::kNoFloats) {
      pos_ += static_cast<std::size_t>(n) * sizeof(float);
      return {};
    }
    std::vector<float> values(static_cast<std::size_t>(n));
    if constexpr (std::endian::native == std::endian::little) {
      if (n > 0) std::memcpy(values.data(), bytes_.data() + pos_, values.size() * sizeof(float));
      pos_ += values.size() * sizeof(float);
    } else {
      for (auto& v : values) v = std::bit_cast<float>(u32(what));
    }
    return values;
  }
  std::vector<nn::ParamEntry> table(const char* what) {
    // Smallest entry: empty name (4), ndim (4), offset (8), numel (8), flag (1).
    const std::uint64_t n = count(u32(what), 25, what);
    std::vector<nn::ParamEntry> entries(n);
    for (auto& entry : entries) {
      entry.name = str(what);
      const std::uint32_t ndim = u32(what);
      if (ndim > kMaxDims) fail(fmt::format("{} '{}' has {} dimensions", what, entry.name, ndim));
      for (std::uint32_t d = 0; d < ndim; ++d) entry.shape.push_back(i64(what));
      entry.offset = i64(what);
      entry.numel = i64(what);
      entry.weight_decay = u8(what) != 0;
    }
    return entries;
  }

 private:
  std::string_view bytes_;
  std::size_t pos_;
  std::size_t end_;
  const std::string& source_;
};

std::string describe_entry(const nn::ParamEntry& entry) {
  return fmt::format("'{}' {} at offset {}", entry.name, tensor::shape_str(entry.shape),
                     entry.offset);
}

void check_table(const std::vector<nn::ParamEntry>& saved, const std::vector<nn::ParamEntry>& model,
                 const char* kind, const std::string& source) {
  const std::size_t common = std::min(saved.size(), model.size());
  for (std::size_t i = 0; i < common; ++i) {
    const auto& a = saved[i];
    const auto& b = model[i];
    if (a.name != b.name || a.shape != b.shape || a.offset != b.offset || a.numel != b.numel) {
      throw CheckpointError(fmt::format(
          "checkpoint {} does not match the model: {} {} is {} in the checkpoint but {} in the "
          "model; resume with the configuration the checkpoint was written with",
          source, kind, i, describe_entry(a), describe_entry(b)));
    }
  }
  if (saved.size() != model.size()) {
    const bool saved_longer = saved.size() > model.size();
    const auto& extra = saved_longer ? saved[common] : model[common];
    throw CheckpointError(fmt::format(
        "checkpoint {} does not match the model: it has {} {} tensors, the model {}; the first "
        "unmatched is {} (only in the {}); resume with the configuration the checkpoint was "
        "written with",
        source, saved.size(), kind, model.size(), describe_entry(extra),
        saved_longer ? "checkpoint" : "model"));
  }
}

}  // namespace

double Checkpoint::scalar(const std::string& name, double fallback) const {
  for (const auto& [key, value] : scalars) {
    if (key == name) return value;
  }
  return fallback;
}

std::size_t encoded_checkpoint_size(const Checkpoint& checkpoint) {
  return kHeaderBytes + payload_size_of(checkpoint) + kTrailerBytes;
}

void encode_checkpoint_into(const Checkpoint& checkpoint, char* out, std::size_t size) {
  const std::size_t payload_size = payload_size_of(checkpoint);
  if (size != kHeaderBytes + payload_size + kTrailerBytes) {
    throw InternalError(fmt::format("encode_checkpoint_into: the checkpoint needs {} bytes, got {}",
                                    kHeaderBytes + payload_size + kTrailerBytes, size));
  }
  Writer file(out);
  file.raw(kCheckpointMagic, sizeof(kCheckpointMagic));
  file.u32(kCheckpointVersion);
  file.u32(0);
  file.u64(payload_size);
  write_payload(checkpoint, file);
  file.u32(file.crc());
}

std::string encode_checkpoint(const Checkpoint& checkpoint) {
  std::string bytes(encoded_checkpoint_size(checkpoint), '\0');
  encode_checkpoint_into(checkpoint, bytes.data(), bytes.size());
  return bytes;
}

Checkpoint decode_checkpoint(std::string_view bytes, const std::string& source, Keep keep) {
  const std::size_t size = bytes.size();
  if (size < kHeaderBytes + kTrailerBytes) {
    throw CheckpointError(fmt::format(
        "checkpoint {} is truncated: {} bytes, shorter than the {}-byte header and checksum",
        source, size, kHeaderBytes + kTrailerBytes));
  }
  if (std::memcmp(bytes.data(), kCheckpointMagic, sizeof(kCheckpointMagic)) != 0) {
    throw CheckpointError(fmt::format(
        "{} is not a dtrain checkpoint: its first 8 bytes are not \"DTRAINCK\"", source));
  }
  Reader header(bytes, sizeof(kCheckpointMagic), kHeaderBytes, source);
  const std::uint32_t version = header.u32("version");
  const std::uint32_t flags = header.u32("flags");
  const std::uint64_t payload_size = header.u64("payload size");
  if (version != kCheckpointVersion) {
    throw CheckpointError(
        fmt::format("checkpoint {} has format version {}; this dtrain reads version {}", source,
                    version, kCheckpointVersion));
  }
  if (flags != 0) {
    throw CheckpointError(fmt::format("checkpoint {} has unknown flags {:#x}", source, flags));
  }
  if (payload_size != size - kHeaderBytes - kTrailerBytes) {
    throw CheckpointError(fmt::format(
        "checkpoint {} is truncated or has trailing bytes: the header announces {} payload bytes, "
        "so the file should be {} bytes, but it is {} bytes",
        source, payload_size, payload_size + kHeaderBytes + kTrailerBytes, size));
  }
  Reader trailer(bytes, size - kTrailerBytes, size, source);
  const std::uint32_t stored_crc = trailer.u32("checksum");
  const std::uint32_t actual_crc = crc32_of(bytes.data(), size - kTrailerBytes);
  if (stored_crc != actual_crc) {
    throw CheckpointError(
        fmt::format("checkpoint {} is corrupt: CRC-32 is {:08x} but the file stores {:08x}", source,
                    actual_crc, stored_crc));
  }

  Reader in(bytes, kHeaderBytes, size - kTrailerBytes, source);
  Checkpoint c;
  c.epoch = in.i64("epoch");
  c.global_step = in.i64("global step");
  c.optimizer_steps = in.i64("optimizer steps");
  c.seed = in.u64("seed");
  c.sampler_epoch = in.i64("sampler epoch");
  c.sampler_position = in.i64("sampler position");
  if (c.epoch < 0 || c.global_step < 0 || c.optimizer_steps < 0 || c.sampler_epoch < 0 ||
      c.sampler_position < 0) {
    in.fail(fmt::format("negative counter (epoch {}, step {}, optimizer steps {}, sampler {}/{})",
                        c.epoch, c.global_step, c.optimizer_steps, c.sampler_epoch,
                        c.sampler_position));
  }
  // Smallest scalar: empty name (4) + value (8).
  const std::uint64_t scalars = in.count(in.u32("scalar count"), 12, "scalars");
  for (std::uint64_t i = 0; i < scalars; ++i) {
    std::string name = in.str("scalar name");
    c.scalars.emplace_back(std::move(name), in.f64("scalar value"));
  }
  c.param_table = in.table("parameter table");
  c.buffer_table = in.table("buffer table");
  c.params = in.floats("parameters", keep);
  c.buffers = in.floats("buffers", keep);
  // Smallest state tensor: empty name (4) + count (8).
  const std::uint64_t states = in.count(in.u32("optimizer state count"), 12, "optimizer state");
  for (std::uint64_t i = 0; i < states; ++i) {
    NamedValues state;
    state.name = in.str("optimizer state name");
    state.values = in.floats("optimizer state values", keep);
    c.optimizer_state.push_back(std::move(state));
  }
  if (in.left() != 0) in.fail(fmt::format("{} unread bytes after the last field", in.left()));
  return c;
}

void write_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  const std::string bytes = encode_checkpoint(checkpoint);
  try {
    write_file_atomically(path, bytes);
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {
    throw CheckpointError(e.what());
  }
}

Checkpoint read_checkpoint(const std::string& path, Keep keep) {
  // Mapped, not read into a string: a resume holds no copy of the file besides what it decodes,
  // and a read that keeps no floats (the supervisor's, the make-room check's) none at all.
  std::optional<MappedFile> file;
  try {
    file.emplace(path);
  } catch (const Error& e) {
    throw CheckpointError(fmt::format("cannot read checkpoint: {}", e.what()));
  }
  return decode_checkpoint(file->bytes(), path, keep);
}

void check_layout(const Checkpoint& checkpoint, const nn::ParamStore& store,
                  const std::string& source) {
  check_table(checkpoint.param_table, store.param_entries(), "parameter", source);
  check_table(checkpoint.buffer_table, store.buffer_entries(), "buffer", source);
  if (static_cast<std::int64_t>(checkpoint.params.size()) != store.num_params() ||
      static_cast<std::int64_t>(checkpoint.buffers.size()) != store.num_buffer_elements()) {
    throw CheckpointError(fmt::format(
        "checkpoint {} does not match the model: it holds {} parameters and {} buffer values, "
        "the model {} and {}",
        source, checkpoint.params.size(), checkpoint.buffers.size(), store.num_params(),
        store.num_buffer_elements()));
  }
}

void restore_into(const Checkpoint& checkpoint, nn::ParamStore& store, const std::string& source) {
  check_layout(checkpoint, store, source);
  for (std::size_t i = 0; i < checkpoint.params.size(); ++i) {
    if (!std::isfinite(checkpoint.params[i])) {
      throw CheckpointError(
          fmt::format("checkpoint {} holds a non-finite parameter at index {}", source, i));
    }
  }
  std::copy(checkpoint.params.begin(), checkpoint.params.end(), store.params());
  std::copy(checkpoint.buffers.begin(), checkpoint.buffers.end(), store.buffers());
}

void capture_from(const nn::ParamStore& store, Checkpoint& checkpoint) {
  checkpoint.param_table = store.param_entries();
  checkpoint.buffer_table = store.buffer_entries();
  checkpoint.params.assign(store.params(), store.params() + store.num_params());
  checkpoint.buffers.assign(store.buffers(), store.buffers() + store.num_buffer_elements());
}

}  // namespace dtrain::train
