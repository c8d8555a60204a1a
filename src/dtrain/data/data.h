// The data/ folder in one include: data sets, readers, normalisation, synthetic data, samplers.
#pragma once

#include "dtrain/data/cifar10_reader.h"
#include "dtrain/data/dataset.h"
#include "dtrain/data/idx_reader.h"
#include "dtrain/data/normalization.h"
#include "dtrain/data/shuffled_sampler.h"
#include "dtrain/data/synthetic.h"
