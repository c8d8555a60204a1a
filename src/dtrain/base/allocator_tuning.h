// glibc malloc settings for a training process, set once at start (dtrain's main does; a C++
// program using the library may call it too).
//
// Why: glibc serves blocks above its mmap threshold (128 KiB at first, raised only after such a
// block is freed) with fresh mmaps and returns them with munmap, and trims the top of its heap
// beyond the trim threshold. A training step allocates and frees blocks of megabytes (activation
// temporaries, a checkpoint's snapshot and its encoding), so each one came back as fresh pages:
// one page fault per 4 KiB, about 2.5 us each on these virtual machines (0.6 ms per MB). Measured
// on the fortunes GPT with a checkpoint every step: 7,100 page faults per checkpoint (28 MB of
// fresh pages) before, none after (docs/FAULTS.md, "Figures"). Blocks up to 32 MiB (glibc's
// largest mmap threshold) now come from the heap, and the heap keeps what it has: a process holds
// its peak of freed memory instead of returning it, which a training process reaches again at
// the next step anyway.
#pragma once

namespace dtrain {

void tune_allocator_for_training();

}  // namespace dtrain
