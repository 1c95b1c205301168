// The library beside an application's own Halide pipelines in one process: Halide's error handler,
// allocator and CUDA context hooks are process-wide, and the library installs its own. Its hooks
// must take only its own calls (recognised by their user_context) and hand every other call to the
// hook installed before them, never reading an application's user_context as theirs.
#include <HalideRuntime.h>
#include <gtest/gtest.h>

#include <string>

#include "attention/attention.h"
#include "kernels/halide_view.h"
#include "linear_f32.h"
#include "test_util.h"

namespace attention_test {
namespace {

// An application's own context and error handler.
struct AppContext {
  int errors = 0;
  std::string last_error;
};

void app_error_handler(void* user_context, const char* message) {
  auto* app = static_cast<AppContext*>(user_context);
  ++app->errors;
  app->last_error = message;
}

// linear_f32 stands in for the application's pipeline: any Halide AOT kernel with user_context.
// Its x is rank 3 ([B, S, E]); a rank-2 x is rejected by Halide's checks inside the kernel.
struct BadLinearCall {
  Tensor x{{2, 3}, Layout::kDense}, weight{{5, 4}, Layout::kDense}, bias{{5}, Layout::kDense};
  Tensor y{{2, 5}, Layout::kDense};
  attention::detail::HalideView hx{x.view()}, hw{weight.view()}, hb{bias.view()}, hy{y.view()};
};

TEST(HalideHooks, ApplicationPipelinesKeepTheirErrorHandler) {
  // The application installs its handler before the library's first call.
  const halide_error_handler_t before = halide_set_error_handler(app_error_handler);
  if (before != halide_default_error) {
    halide_set_error_handler(before);
    GTEST_SKIP() << "the library's hooks were installed earlier in this process; run this test "
                    "alone (CTest does)";
  }
  // A library call installs the library's hooks on top of the application's.
  SdpaTensors t(sdpa_case(1, 2, 2, 5, 7, 16, 16), 1);
  const attention::Status ok =
      attention::scaled_dot_product_attention(t.q.view(), t.k.view(), t.v.view(), t.out.view());
  ASSERT_TRUE(ok.ok()) << ok.message();

  // The application's pipeline fails with its own context: its handler gets the error.
  AppContext app;
  BadLinearCall bad;
  EXPECT_NE(
      attention::kernels::linear_f32(&app, bad.hx.get(), bad.hw.get(), bad.hb.get(), bad.hy.get()),
      0);
  EXPECT_EQ(app.errors, 1);
  EXPECT_NE(app.last_error.find("Input buffer x"), std::string::npos) << app.last_error;

  // The same failure inside a library call becomes that call's Status, and the application's
  // handler sees nothing of it.
  BadLinearCall ours;
  const attention::Status failed =
      attention::detail::run_kernel("linear_f32", attention::kernels::linear_f32, ours.hx.get(),
                                    ours.hw.get(), ours.hb.get(), ours.hy.get());
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.code(), attention::StatusCode::KernelFailure);
  EXPECT_NE(failed.message().find("Input buffer x"), std::string::npos) << failed.message();
  EXPECT_EQ(app.errors, 1);
  EXPECT_FALSE(attention::detail::is_our_call(&app));
  EXPECT_FALSE(attention::detail::is_our_call(nullptr));
}

}  // namespace
}  // namespace attention_test
