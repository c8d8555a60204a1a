// The f16 and bf16 conversions, under the names comm/ has always used; they live in base/half.h so
// that compress/ (which may not include comm/) shares them.
#pragma once

#include "dtrain/base/half.h"

namespace dtrain::comm {

using dtrain::bf16_to_float;
using dtrain::f16_to_float;
using dtrain::float_to_bf16;
using dtrain::float_to_f16;

}  // namespace dtrain::comm
