// Compiled with tensor/'s include view by the layering test: must fail, tensor/ is below nn/.
#include "dtrain/nn/layer.h"
