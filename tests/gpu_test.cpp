// The GPU side of the API: device checks and errors (run everywhere, no GPU needed), and SDPA on
// CUDA device pointers (skipped, with the reason, without a CUDA device). The numerical suites run
// on each GPU backend through ATTENTION_TEST_BACKEND (tests/CMakeLists.txt).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "reference/sdpa_reference.h"
#include "test_util.h"

namespace attention_test {
namespace {

using attention::Backend;
using attention::Device;

// A device address no test dereferences: every call below fails its checks first.
void* const kFakeDevicePointer = reinterpret_cast<void*>(uintptr_t{1} << 40);

attention::TensorView on_cuda(attention::TensorView t, void* device_data = kFakeDevicePointer) {
  t.device = Device::CUDA;
  t.data = device_data;
  return t;
}

// Every element of the storage is still the NaN poison: the call wrote nothing.
bool all_nan(const Tensor& t) {
  return std::all_of(t.storage().begin(), t.storage().end(), [](float x) { return std::isnan(x); });
}

struct SmallCall {
  SdpaCase c = sdpa_case(1, 2, 2, 5, 7, 8, 8);
  SdpaTensors t{c, 1};
  SmallCall() { t.out.poison(); }
};

TEST(GpuErrors, MixedDevicesAreRejected) {
  SmallCall call;
  const attention::Status status = attention::scaled_dot_product_attention(
      on_cuda(call.t.q.view()), call.t.k.view(), call.t.v.view(), call.t.out.view());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), attention::StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("k: on Device::CPU but q is on Device::CUDA"), std::string::npos)
      << status.message();
  EXPECT_TRUE(all_nan(call.t.out)) << "out was written";
}

TEST(GpuErrors, CudaTensorsNeedTheCudaBackend) {
  SmallCall call;
  attention::SdpaOptions options;
  options.backend = Backend::CPU;
  const attention::Status status = attention::scaled_dot_product_attention(
      on_cuda(call.t.q.view()), on_cuda(call.t.k.view()), on_cuda(call.t.v.view()),
      on_cuda(call.t.out.view()), options);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("a Device::CUDA tensor, but the backend is CPU"),
            std::string::npos)
      << status.message();
}

TEST(GpuErrors, OtherEntryPointsTakeHostTensorsOnly) {
  Tensor queries({1, 3, 2}, Layout::kDense), out({1, 3, 2}, Layout::kDense);
  out.poison();
  const attention::Status status =
      attention::nadaraya_watson_attention(on_cuda(queries.view()), on_cuda(queries.view()),
                                           on_cuda(queries.view()), on_cuda(out.view()));
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("queries: expected a CPU tensor"), std::string::npos)
      << status.message();
  EXPECT_TRUE(all_nan(out));
}

// Halide's GPU runtimes abort on negative strides: the library refuses them before any copy.
TEST(GpuErrors, ReversedViewsAreRefused) {
  SmallCall call;
  attention::TensorView k = call.t.k.view();
  k.data = static_cast<float*>(k.data) + (k.shape[2] - 1) * k.strides[2];
  k.strides[2] = -k.strides[2];  // keys walked backwards
  attention::SdpaOptions options;
  options.backend = Backend::OpenCL;
  const attention::Status status = attention::scaled_dot_product_attention(
      call.t.q.view(), k, call.t.v.view(), call.t.out.view(), options);
  ASSERT_FALSE(status.ok());
  const std::string expected =
      attention::backend_available(Backend::OpenCL).ok()
          ? "k: negative stride -8 in dimension 2: the GPU backends need non-negative strides"
          : "backend OpenCL is not available here";
  EXPECT_NE(status.message().find(expected), std::string::npos) << status.message();
  EXPECT_TRUE(all_nan(call.t.out));
}

// Without a driver or device, asking for CUDA is an error naming what is missing, and nothing runs.
TEST(GpuErrors, UnavailableCudaIsAnError) {
  const attention::Status available = attention::backend_available(Backend::CUDA);
  if (available.ok()) GTEST_SKIP() << "a CUDA device is present";
  SmallCall call;
  attention::SdpaOptions options;
  options.backend = Backend::CUDA;
  const attention::Status status = attention::scaled_dot_product_attention(
      call.t.q.view(), call.t.k.view(), call.t.v.view(), call.t.out.view(), options);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), attention::StatusCode::BackendUnavailable);
  EXPECT_EQ(available.code(), attention::StatusCode::BackendUnavailable);
  EXPECT_EQ(status.message(), available.message());
  EXPECT_NE(status.message().find("backend CUDA is not available here: "), std::string::npos);
  EXPECT_TRUE(all_nan(call.t.out));
}

// The CUDA driver API, looked up at run time (no CUDA toolkit at build time): device memory for
// the device-pointer test, in the primary context the library runs its kernels in.
class CudaMemory {
 public:
  CudaMemory() {
    driver_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!driver_) return;
    auto init = symbol<int (*)(unsigned)>("cuInit");
    auto device_get = symbol<int (*)(int*, int)>("cuDeviceGet");
    auto retain = symbol<int (*)(void**, int)>("cuDevicePrimaryCtxRetain");
    auto set_current = symbol<int (*)(void*)>("cuCtxSetCurrent");
    alloc_ = symbol<int (*)(uint64_t*, size_t)>("cuMemAlloc_v2");
    free_ = symbol<int (*)(uint64_t)>("cuMemFree_v2");
    to_device_ = symbol<int (*)(uint64_t, const void*, size_t)>("cuMemcpyHtoD_v2");
    to_host_ = symbol<int (*)(void*, uint64_t, size_t)>("cuMemcpyDtoH_v2");
    int device = 0;
    void* context = nullptr;
    ready_ = init && device_get && retain && set_current && alloc_ && free_ && to_device_ &&
             to_host_ && init(0) == 0 && device_get(&device, 0) == 0 &&
             retain(&context, device) == 0 && set_current(context) == 0;
  }
  ~CudaMemory() {
    for (uint64_t p : allocations_) free_(p);
  }
  bool ready() const { return ready_; }

  // A device copy of `t`'s whole allocation (padding included) viewed like `t`.
  attention::TensorView copy_to_device(Tensor& t) {
    const std::vector<float>& host = t.storage();
    uint64_t p = 0;
    EXPECT_EQ(alloc_(&p, host.size() * sizeof(float)), 0);
    allocations_.push_back(p);
    EXPECT_EQ(to_device_(p, host.data(), host.size() * sizeof(float)), 0);
    const auto offset =
        reinterpret_cast<const char*>(t.view().data) - reinterpret_cast<const char*>(host.data());
    return on_cuda(t.view(), reinterpret_cast<char*>(p) + offset);
  }
  void copy_to_host(const attention::TensorView& device_view, Tensor& t) {
    std::vector<float>& host = t.storage();
    const auto offset =
        reinterpret_cast<const char*>(t.view().data) - reinterpret_cast<const char*>(host.data());
    const uint64_t base = reinterpret_cast<uint64_t>(device_view.data) - offset;
    EXPECT_EQ(to_host_(host.data(), base, host.size() * sizeof(float)), 0);
  }

 private:
  template <typename Fn>
  Fn symbol(const char* name) {
    return reinterpret_cast<Fn>(dlsym(driver_, name));
  }
  void* driver_ = nullptr;
  bool ready_ = false;
  int (*alloc_)(uint64_t*, size_t) = nullptr;
  int (*free_)(uint64_t) = nullptr;
  int (*to_device_)(uint64_t, const void*, size_t) = nullptr;
  int (*to_host_)(void*, uint64_t, size_t) = nullptr;
  std::vector<uint64_t> allocations_;
};

// SDPA on device pointers (no copies by the library): prefill and decode, plain and causal, with
// padded layouts and logsumexp, against the double reference.
TEST(CudaDevicePointers, SdpaMatchesReference) {
  const attention::Status available = attention::backend_available(Backend::CUDA);
  if (!available.ok()) GTEST_SKIP() << available.message();
  CudaMemory memory;
  ASSERT_TRUE(memory.ready()) << "CUDA is available but device memory could not be set up";
  for (const SdpaCase& base :
       {sdpa_case(2, 4, 2, 77, 130, 64, 64), sdpa_case(1, 8, 8, 1, 999, 128, 128)}) {
    for (bool causal : {false, true}) {
      SdpaCase c = base;
      c.logsumexp = true;
      c.out_layout = Layout::kPadded;
      const uint64_t seed = seed_for_current_test();
      SCOPED_TRACE(describe(c) + (causal ? ", causal" : "") + ", " + seed_note(seed));
      SdpaTensors t(c, seed);
      t.out.poison();
      t.lse.poison();
      attention::SdpaOptions options;
      options.mask.causal = causal ? attention::Causal::BottomRight : attention::Causal::None;
      const attention::TensorView dq = memory.copy_to_device(t.q), dk = memory.copy_to_device(t.k),
                                  dv = memory.copy_to_device(t.v),
                                  dout = memory.copy_to_device(t.out),
                                  dlse = memory.copy_to_device(t.lse);
      options.logsumexp = dlse;
      const attention::Status status =
          attention::scaled_dot_product_attention(dq, dk, dv, dout, options);
      ASSERT_TRUE(status.ok()) << status.message();
      memory.copy_to_host(dout, t.out);
      memory.copy_to_host(dlse, t.lse);
      std::vector<double> reference_out, reference_lse;
      reference_sdpa(t.q.view(), t.k.view(), t.v.view(), c.effective_scale(), &reference_out,
                     &reference_lse, causal ? &options.mask : nullptr);
      EXPECT_TRUE(matches_reference(t.out.to_dense(), reference_out, t.out.shape()));
      EXPECT_TRUE(t.out.outside_view_holds(std::numeric_limits<float>::quiet_NaN()))
          << "in out's padding";
      EXPECT_TRUE(matches_reference(t.lse.to_dense(), reference_lse, t.lse.shape(), Domain::Log));
    }
  }
}

}  // namespace
}  // namespace attention_test
