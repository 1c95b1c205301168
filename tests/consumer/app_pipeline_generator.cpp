// The consumer application's own Halide pipeline, unrelated to attention: out(x) = 2 · in(x) + 1,
// with the application's own user_context (consumer.cpp passes its context and error handler).
#include "Halide.h"

namespace {

class AppScale : public Halide::Generator<AppScale> {
 public:
  Input<Buffer<float, 1>> in{"in"};
  Output<Buffer<float, 1>> out{"out"};

  void generate() {
    Halide::Var x("x");
    out(x) = in(x)*2.0f + 1.0f;
  }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(AppScale, app_scale)
