#include "dtrain/nn/model.h"

#include <gtest/gtest.h>

#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/nn/flatten.h"
#include "dtrain/nn/linear.h"

namespace dtrain::nn {
namespace {

// A layer that passes its input through and records the need_input_grad flags backward received.
class SpyLayer : public Layer {
 public:
  SpyLayer(std::string name, std::vector<bool>* log, bool with_param)
      : Layer(std::move(name)), log_(log), with_param_(with_param) {}
  std::string describe() const override { return "Spy"; }
  tensor::Shape output_shape(const tensor::Shape& input) const override { return input; }
  void declare(ParamStore& store) override {
    if (with_param_) store.add_param(name() + ".p", {1}, false);
  }
  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext&) override {
    y_ = x;
    return y_;
  }
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override {
    log_->push_back(need_input_grad);
    dx_ = dy;
    return dx_;
  }

 private:
  std::vector<bool>* log_;
  bool with_param_;
  tensor::Tensor y_, dx_;
};

TEST(Model, BackwardSkipsLayersBelowTheFirstTrainableOne) {
  std::vector<bool> log;
  Model model({4});
  model.add(std::make_unique<SpyLayer>("a", &log, false));
  model.add(std::make_unique<SpyLayer>("b", &log, true));
  model.add(std::make_unique<SpyLayer>("c", &log, false));
  model.add(std::make_unique<SpyLayer>("d", &log, true));
  model.build();
  tensor::Tensor x = tensor::Tensor::zeros({2, 4});
  model.forward(x, {});
  model.backward(x);
  // Called in reverse: d and c need dx (b learns), b does not (nothing below learns), a is skipped.
  EXPECT_EQ(log, (std::vector<bool>{true, true, false}));
}

TEST(Model, ShapeMisfitNamesTheLayerAtBuild) {
  Model model({1, 28, 28});
  model.add(std::make_unique<Flatten>("flatten"));
  model.add(std::make_unique<Linear>("fc1", 783, 10));
  try {
    model.build();
    FAIL() << "no throw";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("fc1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("784"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::nn
