// The data/ folder in one include: data sets (dense and sparse CSR), readers (IDX, CIFAR-10,
// libsvm), normalisation, synthetic data, samplers.
#pragma once

#include "dtrain/data/cifar10_reader.h"
#include "dtrain/data/dataset.h"
#include "dtrain/data/idx_reader.h"
#include "dtrain/data/libsvm_reader.h"
#include "dtrain/data/normalization.h"
#include "dtrain/data/shuffled_sampler.h"
#include "dtrain/data/sparse_dataset.h"
#include "dtrain/data/sparse_synthetic.h"
#include "dtrain/data/synthetic.h"
