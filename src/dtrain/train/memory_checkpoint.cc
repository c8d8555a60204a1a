#include "dtrain/train/memory_checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <utility>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'D', 'T', 'R', 'A', 'I', 'N', 'M', 'C'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 4096;
constexpr std::size_t kPage = 4096;

struct Header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t zero;
  std::uint64_t slot_capacity;
  std::uint64_t sequence[2];  // 0: empty, or a save in progress
  std::uint64_t bytes[2];
  char run_dir[kHeaderBytes - 56];  // NUL-terminated
};
static_assert(sizeof(Header) == kHeaderBytes);

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ull;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

std::string canonical_run_dir(const std::string& run_dir) {
  std::error_code ec;
  const fs::path path = fs::weakly_canonical(fs::absolute(run_dir), ec);
  return ec ? fs::absolute(run_dir).lexically_normal().string() : path.string();
}

std::string system_reason() { return std::strerror(errno); }

std::uint64_t load(const std::uint64_t& field) {
  return std::atomic_ref<const std::uint64_t>(field).load(std::memory_order_acquire);
}

// Whether the mapped header is a memory tier of `run_dir` whose slots fit in `file_bytes`.
bool header_belongs(const Header& header, const std::string& run_dir, std::size_t file_bytes) {
  return std::memcmp(header.magic, kMagic, sizeof(kMagic)) == 0 && header.version == kVersion &&
         header.slot_capacity > 0 && header.slot_capacity % kPage == 0 &&
         file_bytes == kHeaderBytes + 2 * header.slot_capacity &&
         std::string_view(header.run_dir, strnlen(header.run_dir, sizeof(header.run_dir))) ==
             std::string_view(run_dir).substr(0, sizeof(header.run_dir) - 1);  // as stored
}

// Order of checkpoints, as CheckpointDir names them: epoch, then inside an epoch, then step.
std::tuple<std::int64_t, bool, std::int64_t> order_of(const Checkpoint& checkpoint) {
  return {checkpoint.sampler_epoch, checkpoint.sampler_position != 0,
          checkpoint.sampler_position != 0 ? checkpoint.global_step : 0};
}

}  // namespace

MemoryCheckpoint::MemoryCheckpoint(const std::string& run_dir, const std::string& folder)
    : run_dir_(canonical_run_dir(run_dir)),
      path_((fs::path(folder) / fmt::format("dtrain-{}-{:016x}.ckpt", ::getuid(), fnv1a(run_dir_)))
                .string()) {}

MemoryCheckpoint::~MemoryCheckpoint() { unmap(); }

void MemoryCheckpoint::unmap() {
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
  base_ = nullptr;
  mapped_bytes_ = 0;
}

void MemoryCheckpoint::map_for_writing(std::size_t image_bytes) {
  unmap();
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw CheckpointError(fmt::format(
        "cannot open the memory checkpoint {}: {}; set train.memory_checkpoint_folder to a "
        "writable tmpfs, or train.memory_checkpoint_every_steps = 0",
        path_, system_reason()));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  const std::size_t existing = ::fstat(fd, &info) == 0 ? static_cast<std::size_t>(info.st_size) : 0;
  // A file of this run with room for the image (a restarted run): kept, so that its newest slot
  // stays until the first save replaces the older one.
  if (existing >= kHeaderBytes) {
    void* mapped = ::mmap(nullptr, existing, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped != MAP_FAILED) {
      const auto& header = *static_cast<const Header*>(mapped);
      if (header_belongs(header, run_dir_, existing) && header.slot_capacity >= image_bytes) {
        base_ = static_cast<char*>(mapped);
        mapped_bytes_ = existing;
        return;
      }
      ::munmap(mapped, existing);
    }
  }
  // A new file: slots with 1/64 + 64 KiB of slack for scalars that come and go.
  const std::size_t capacity =
      (image_bytes + image_bytes / 64 + (64u << 10) + kPage - 1) / kPage * kPage;
  const std::size_t total = kHeaderBytes + 2 * capacity;
  // A file that cannot be sized or whose space cannot be reserved: the tier is off, and nothing
  // of it is left behind.
  auto no_room = [&](const char* call, int error) {
    ::unlink(path_.c_str());
    throw CheckpointError(fmt::format(
        "no room for memory checkpoints: {} needs {:.1f} MB (two slots of {:.1f} MB) and {} says: "
        "{}; free space in {}, set train.memory_checkpoint_folder, or set "
        "train.memory_checkpoint_every_steps = 0",
        path_, static_cast<double>(total) / 1e6, static_cast<double>(capacity) / 1e6, call,
        std::strerror(error), fs::path(path_).parent_path().string()));
  };
  if (::ftruncate(fd, 0) != 0 || ::ftruncate(fd, static_cast<off_t>(total)) != 0) {
    no_room("ftruncate", errno);
  }
  if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(total)); error != 0) {
    no_room("posix_fallocate", error);
  }
  void* mapped = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) {
    throw CheckpointError(
        fmt::format("cannot map the memory checkpoint {}: {}", path_, system_reason()));
  }
  base_ = static_cast<char*>(mapped);
  mapped_bytes_ = total;
  auto& header = *reinterpret_cast<Header*>(base_);
  std::memset(&header, 0, sizeof(header));
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kVersion;
  header.slot_capacity = capacity;
  std::memcpy(header.run_dir, run_dir_.data(),
              std::min(run_dir_.size(), sizeof(header.run_dir) - 1));
}

void MemoryCheckpoint::save(const Checkpoint& checkpoint) {
  if (off_) return;
  const std::size_t image_bytes = encoded_checkpoint_size(checkpoint);
  try {
    if (base_ == nullptr || reinterpret_cast<const Header*>(base_)->slot_capacity < image_bytes) {
      map_for_writing(image_bytes);
    }
  } catch (const CheckpointError&) {
    off_ = true;
    throw;
  }
  auto& header = *reinterpret_cast<Header*>(base_);
  const std::uint64_t first = load(header.sequence[0]);
  const std::uint64_t second = load(header.sequence[1]);
  const int slot = first <= second ? 0 : 1;  // the older (or an empty) slot
  std::atomic_ref<std::uint64_t> sequence(header.sequence[slot]);
  // The slot reads as empty before any byte of the image changes: an exchange with acquire
  // ordering keeps the image's stores after it (a full barrier on x86, as the fence it replaces;
  // ThreadSanitizer does not model fences, and the train library builds under it).
  sequence.exchange(0, std::memory_order_acq_rel);
  encode_checkpoint_into(checkpoint, base_ + kHeaderBytes + slot * header.slot_capacity,
                         image_bytes);
  header.bytes[slot] = image_bytes;
  sequence.store(std::max(first, second) + 1, std::memory_order_release);
}

std::optional<VerifiedCheckpoint> MemoryCheckpoint::newest(Keep keep) const {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat info {};
  const std::size_t size = ::fstat(fd, &info) == 0 ? static_cast<std::size_t>(info.st_size) : 0;
  void* mapped =
      size >= kHeaderBytes ? ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (mapped == MAP_FAILED) return std::nullopt;
  struct Unmapper {
    void* at;
    std::size_t bytes;
    ~Unmapper() { ::munmap(at, bytes); }
  } unmapper{mapped, size};
  const char* base = static_cast<const char*>(mapped);
  const auto& header = *reinterpret_cast<const Header*>(base);
  if (!header_belongs(header, run_dir_, size)) return std::nullopt;
  std::pair<std::uint64_t, int> slots[2] = {{load(header.sequence[0]), 0},
                                            {load(header.sequence[1]), 1}};
  std::sort(std::begin(slots), std::end(slots), std::greater<>());
  for (const auto& [sequence, slot] : slots) {
    if (sequence == 0) continue;
    const std::string name = fmt::format("{}#slot{}", path_, slot);
    const std::uint64_t bytes = header.bytes[slot];
    if (bytes > header.slot_capacity) {
      log::warn("memory checkpoint {} claims {} bytes in a slot of {}; passing it over", name,
                bytes, header.slot_capacity);
      continue;
    }
    try {
      return VerifiedCheckpoint{
          name, decode_checkpoint(
                    std::string_view(base + kHeaderBytes + slot * header.slot_capacity, bytes),
                    name, keep)};
    } catch (const CheckpointError& e) {
      log::warn("{}; passing it over", e.what());
    }
  }
  return std::nullopt;
}

bool MemoryCheckpoint::holds_any() const {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat info {};
  Header header{};
  const bool read = ::fstat(fd, &info) == 0 &&
                    ::pread(fd, &header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header));
  ::close(fd);
  return read && header_belongs(header, run_dir_, static_cast<std::size_t>(info.st_size)) &&
         (header.sequence[0] != 0 || header.sequence[1] != 0);
}

void MemoryCheckpoint::remove() {
  unmap();
  ::unlink(path_.c_str());
}

VerifiedCheckpoint newest_checkpoint(const CheckpointDir& disk, const MemoryCheckpoint* memory,
                                     Keep keep) {
  std::optional<VerifiedCheckpoint> in_memory = memory ? memory->newest(keep) : std::nullopt;
  // A memory slot newer than every file needs no file read (the usual restart).
  if (in_memory && disk.is_older_than(in_memory->checkpoint)) return std::move(*in_memory);
  try {
    VerifiedCheckpoint on_disk = disk.newest_good(keep);
    if (in_memory && order_of(on_disk.checkpoint) < order_of(in_memory->checkpoint)) {
      return std::move(*in_memory);
    }
    return on_disk;
  } catch (const CheckpointError& e) {
    if (!in_memory && memory != nullptr && memory->holds_any()) {
      throw CheckpointError(fmt::format(
          "{}; and no slot of the memory checkpoint {} verifies (see the warnings above)", e.what(),
          memory->path()));
    }
    if (!in_memory) throw;
    log::warn("{}; resuming from the memory checkpoint {}", e.what(), in_memory->path);
    return std::move(*in_memory);
  }
}

bool has_any_checkpoint(const CheckpointDir& disk, const MemoryCheckpoint* memory) {
  return disk.has_any() || (memory != nullptr && memory->holds_any());
}

}  // namespace dtrain::train
