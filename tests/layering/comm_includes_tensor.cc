// Compiled with comm/'s include view by the layering test: must fail. Collectives move typed raw
// buffers; tensors never cross into comm/.
#include "dtrain/tensor/tensor.h"
