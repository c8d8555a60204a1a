// Shared scratch memory for the workers of a fork server (docs/FAULTS.md, "Restarts by fork").
//
// Why: a new process's first training step is slow because every page of its activations is
// fresh: a page fault, a page zeroed (and on these virtual machines the host backing the page),
// about 2.2-2.5 us per 4-KiB page, 0.15-0.2 s for the fortunes GPT's 300 MB. A worker forked from
// a template does not escape it with private memory: the template's pages are copy-on-write, so
// each write faults and copies the page instead. Memory mapped MAP_SHARED | MAP_ANONYMOUS is
// shared by the template and every worker it forks, the pages themselves, not copies: a template
// that ran one step with its tensors in this arena hands every worker activation pages that are
// already allocated and populated. A worker only maps them (MADV_POPULATE_READ once over the
// arena: about 0.07 us per page, before it is needed, instead of 2.2-2.5 us per page inside the
// first step).
//
// The contents are scratch: the template never reads its tensors in the arena again after its
// warm-up (it only forks), a worker overwrites an activation before it reads it (as every step
// after the first does in any process), and one worker runs at a time. State that a restart must
// not inherit from a killed worker (parameters, gradients, optimizer state, data) is allocated
// before the arena is installed, in private memory.
//
// Allocation: blocks of at least kMinBytes (smaller ones stay on the heap: few pages), rounded up
// to 64 bytes, from per-size free lists (a training step allocates the same sizes each step), else
// from the top of the arena; a block that does not fit comes from the heap (nullptr here). Thread
// safe (one mutex: a step allocates a few hundred blocks).
#pragma once

#include <cstddef>

namespace dtrain::shared_scratch {

inline constexpr std::size_t kMinBytes = 64 * 1024;

// Maps an arena of `capacity` bytes (address space only: pages are allocated as they are first
// written) and serves allocate() from it from now on. Returns false (and serves nothing) when the
// mapping fails or an arena is installed already.
bool install(std::size_t capacity);
bool installed();

// `bytes` from the arena, 64-byte aligned, or nullptr (no arena, below kMinBytes, full).
void* allocate(std::size_t bytes);
// Gives back a block allocate() returned, with the `bytes` it was asked for.
void release(void* block, std::size_t bytes);
bool owns(const void* block);

// Bytes of the arena handed out so far (its high-water mark: the top).
std::size_t used();
// Maps every page below the top into this process, writable (MADV_POPULATE_READ; contents
// unchanged);
// false when the kernel refuses (before Linux 5.14): the pages are then mapped at first touch.
bool populate();

// For tests: unmaps the arena and forgets every block (no block may be in use).
void uninstall_for_test();

}  // namespace dtrain::shared_scratch
