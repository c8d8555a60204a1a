#include "dtrain/compress/codec.h"

namespace dtrain::compress {

const char* exchange_name(Exchange exchange) {
  switch (exchange) {
    case Exchange::kSummable: return "allreduce";
    case Exchange::kGather: return "allgather";
    case Exchange::kLowRank: return "two allreduces";
  }
  return "?";
}

std::int64_t Codec::wire_count(std::int64_t n) const {
  return static_cast<std::int64_t>(encoded_bytes(n) / dtype_size(wire_dtype()));
}

}  // namespace dtrain::compress
