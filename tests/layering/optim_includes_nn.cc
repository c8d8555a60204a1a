// Compiled with optim/'s include view by the layering test: must fail, optim/ and nn/ are peers
// that do not see each other (optim works on flat buffers, not layers).
#include "dtrain/nn/param_store.h"
