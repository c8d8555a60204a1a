// Compiled with train/'s include view by the layering test: must fail, train/ (level 4) may not
// include experiments/ (level 5): sweeps and benchmarks drive the trainer from above.
#include "dtrain/experiments/sweep.h"
