#include "dtrain/parallel/reducers/allreduce_reducer.h"

namespace dtrain::parallel {

std::string AllreduceReducer::algorithm() const {
  return context_.collective.algorithm.empty() ? context_.comm.options().allreduce_algorithm
                                               : context_.collective.algorithm;
}

void AllreduceReducer::reduce(const GradientBucket& bucket, float* grads) {
  context_.comm.allreduce(grads, bucket.count, DType::kF32, comm::ReduceOp::kSum,
                          context_.collective);
}

comm::Work AllreduceReducer::reduce_async(const GradientBucket& bucket, float* grads) {
  return context_.comm.allreduce_async(grads, bucket.count, DType::kF32, comm::ReduceOp::kSum,
                                       context_.collective);
}

ReducerFactory allreduce_reducer() {
  return [](const ReducerContext& context) { return std::make_unique<AllreduceReducer>(context); };
}

}  // namespace dtrain::parallel
