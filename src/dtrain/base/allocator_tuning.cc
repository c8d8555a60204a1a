#include "dtrain/base/allocator_tuning.h"

#include <malloc.h>

namespace dtrain {

void tune_allocator_for_training() {
  constexpr int kMmapThreshold = 32 << 20;    // glibc's largest on 64-bit systems
  constexpr int kTrimThreshold = 1 << 30;     // keep up to 1 GiB of freed heap
  mallopt(M_MMAP_THRESHOLD, kMmapThreshold);  // fixes it: no more dynamic adjustment
  mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
}

}  // namespace dtrain
