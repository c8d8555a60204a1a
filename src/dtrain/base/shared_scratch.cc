#include "dtrain/base/shared_scratch.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace dtrain::shared_scratch {
namespace {

#ifndef MADV_POPULATE_READ
constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14
#endif

constexpr std::size_t kAlignment = 64;

struct Arena {
  std::atomic<bool> on{false};  // base != nullptr, read without the mutex by allocate()
  std::mutex mutex;
  char* base = nullptr;
  std::size_t capacity = 0;
  std::size_t top = 0;
  std::unordered_map<std::size_t, std::vector<char*>> free_blocks;  // by rounded size
};

Arena& arena() {
  static Arena* const instance = new Arena;  // never destroyed: blocks may outlive statics
  return *instance;
}

std::size_t rounded(std::size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

bool install(std::size_t capacity) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  if (a.base != nullptr || capacity == 0) return false;
  void* memory = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) return false;
  a.base = static_cast<char*>(memory);
  a.capacity = capacity;
  a.top = 0;
  a.on.store(true);
  return true;
}

bool installed() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  return a.base != nullptr;
}

void* allocate(std::size_t bytes) {
  if (bytes < kMinBytes) return nullptr;
  Arena& a = arena();
  if (!a.on.load(std::memory_order_relaxed)) return nullptr;  // the common case: no fork server
  const std::size_t size = rounded(bytes);
  std::lock_guard<std::mutex> lock(a.mutex);
  if (a.base == nullptr) return nullptr;
  if (auto found = a.free_blocks.find(size);
      found != a.free_blocks.end() && !found->second.empty()) {
    char* block = found->second.back();
    found->second.pop_back();
    return block;
  }
  if (size > a.capacity - a.top) return nullptr;
  char* block = a.base + a.top;
  a.top += size;
  return block;
}

void release(void* block, std::size_t bytes) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  a.free_blocks[rounded(bytes)].push_back(static_cast<char*>(block));
}

bool owns(const void* block) {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  const auto* p = static_cast<const char*>(block);
  return a.base != nullptr && p >= a.base && p < a.base + a.capacity;
}

std::size_t used() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  return a.top;
}

bool populate() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  if (a.base == nullptr || a.top == 0) return true;
  const std::size_t page = 4096;
  const std::size_t length = (a.top + page - 1) / page * page;
  // READ, not WRITE: a read fault on a page of shared memory that is in the page cache maps its
  // neighbours too (the kernel's fault-around, 64 KiB), and writable, since shared anonymous
  // memory needs no dirty tracking; a write fault maps one page. 273 MB: 19 ms against 55 ms, and
  // no fault at the writes after either (a C loop over 4-KiB pages in a forked child, 2026-11-27).
  return madvise(a.base, length, MADV_POPULATE_READ) == 0;
}

void uninstall_for_test() {
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  if (a.base != nullptr) munmap(a.base, a.capacity);
  a.on.store(false);
  a.base = nullptr;
  a.capacity = 0;
  a.top = 0;
  a.free_blocks.clear();
}

}  // namespace dtrain::shared_scratch
