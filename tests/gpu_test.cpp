// The GPU side of the API: device checks and errors (run everywhere, no GPU needed), and SDPA on
// CUDA device pointers (skipped, with the reason, without a CUDA device). The numerical suites run
// on each GPU backend through ATTENTION_TEST_BACKEND (tests/CMakeLists.txt).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "execute/gpu.h"
#if ATTENTION_TEST_GPU_MODS
#include "attention/mod_attention.h"
#include "mod_document_mask_prefill.h"
#include "mod_document_mask_prefill_cuda.h"
#include "mod_document_mask_ranges.h"
#include "mod_document_mask_ranges_cuda.h"
#endif
#include "kernels/halide_view.h"
#include "kernels/kernel_choice.h"
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
    stream_create_ = symbol<int (*)(void**, unsigned)>("cuStreamCreate");
    stream_sync_ = symbol<int (*)(void*)>("cuStreamSynchronize");
    stream_destroy_ = symbol<int (*)(void*)>("cuStreamDestroy_v2");
    int device = 0;
    void* context = nullptr;
    ready_ = init && device_get && retain && set_current && alloc_ && free_ && to_device_ &&
             to_host_ && stream_create_ && stream_sync_ && stream_destroy_ && init(0) == 0 &&
             device_get(&device, 0) == 0 && retain(&context, device) == 0 &&
             set_current(context) == 0;
  }
  ~CudaMemory() {
    for (void* s : streams_) stream_destroy_(s);
    for (uint64_t p : allocations_) free_(p);
  }
  // A stream that does not wait for the legacy default stream (CU_STREAM_NON_BLOCKING).
  void* new_stream() {
    void* s = nullptr;
    EXPECT_EQ(stream_create_(&s, 1), 0);
    streams_.push_back(s);
    return s;
  }
  void synchronize(void* stream) { EXPECT_EQ(stream_sync_(stream), 0); }
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
  // A device copy of the elements `host` spans (from its first element to its last, at its
  // strides; any element type), viewed like it.
  attention::TensorView copy_span_to_device(const attention::TensorView& host) {
    uint64_t p = 0;
    const size_t bytes = span_bytes(host);
    EXPECT_EQ(alloc_(&p, bytes), 0);
    allocations_.push_back(p);
    EXPECT_EQ(to_device_(p, host.data, bytes), 0);
    return on_cuda(host, reinterpret_cast<void*>(p));
  }
  void copy_span_to_host(const attention::TensorView& device_view,
                         const attention::TensorView& host) {
    EXPECT_EQ(to_host_(host.data, reinterpret_cast<uint64_t>(device_view.data), span_bytes(host)),
              0);
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
  static size_t span_bytes(const attention::TensorView& t) {
    int64_t last = 0;
    for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.strides[d];
    const size_t element =
        t.dtype == attention::DType::Float32 || t.dtype == attention::DType::Int32 ? 4
        : t.dtype == attention::DType::Bool                                        ? 1
                                                                                   : 2;
    return static_cast<size_t>(last + 1) * element;
  }
  void* driver_ = nullptr;
  bool ready_ = false;
  int (*alloc_)(uint64_t*, size_t) = nullptr;
  int (*free_)(uint64_t) = nullptr;
  int (*to_device_)(uint64_t, const void*, size_t) = nullptr;
  int (*to_host_)(void*, uint64_t, size_t) = nullptr;
  int (*stream_create_)(void**, unsigned) = nullptr;
  int (*stream_sync_)(void*) = nullptr;
  int (*stream_destroy_)(void*) = nullptr;
  std::vector<uint64_t> allocations_;
  std::vector<void*> streams_;
};

// Tests on CUDA device memory: skipped without a CUDA device, `memory` set up otherwise.
class CudaDevicePointers : public ::testing::Test {
 protected:
  void SetUp() override {
    const attention::Status available = attention::backend_available(Backend::CUDA);
    if (!available.ok()) GTEST_SKIP() << available.message();
    ASSERT_TRUE(memory.ready()) << "CUDA is available but device memory could not be set up";
  }
  CudaMemory memory;
};

// SDPA on device pointers (no copies by the library): prefill and decode, plain and causal, with
// padded layouts and logsumexp, against the double reference.
TEST_F(CudaDevicePointers, SdpaMatchesReference) {
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

// Half-precision device tensors: all one half type, and fp32 q and out over a half KV cache, for
// decode (the kernels that read the cache as stored) and prefill (operands widened into device
// scratch), plain and causal, on a stream; and convert_dtype on device tensors.
TEST_F(CudaDevicePointers, HalfTensorsMatchReference) {
  void* stream = memory.new_stream();
  for (attention::DType dtype : {attention::DType::Float16, attention::DType::BFloat16}) {
    for (const SdpaCase& base :
         {sdpa_case(1, 8, 2, 1, 999, 128, 128), sdpa_case(2, 4, 2, 77, 130, 64, 64)}) {
      for (bool all_half : {false, true}) {
        SdpaCase c = base;
        c.logsumexp = true;
        c.out_layout = Layout::kPadded;
        const uint64_t seed = seed_for_current_test();
        SCOPED_TRACE(describe(c) +
                     (dtype == attention::DType::Float16 ? ", Float16" : ", BFloat16") +
                     (all_half ? " q, k, v, out" : " k, v") + ", " + seed_note(seed));
        SdpaTensors t(c, seed);
        t.out.poison();
        t.lse.poison();
        HalfCopy q(t.q.view(), dtype), k(t.k.view(), dtype), v(t.v.view(), dtype),
            out(t.out.view(), dtype);
        attention::SdpaOptions options;
        options.mask.causal = attention::Causal::BottomRight;
        options.gpu.cuda_stream = stream;
        const attention::TensorView dq = memory.copy_span_to_device(all_half ? q.view()
                                                                             : t.q.view()),
                                    dk = memory.copy_span_to_device(k.view()),
                                    dv = memory.copy_span_to_device(v.view()),
                                    dout = all_half ? memory.copy_span_to_device(out.view())
                                                    : memory.copy_to_device(t.out),
                                    dlse = memory.copy_to_device(t.lse);
        options.logsumexp = dlse;
        const attention::Status status =
            attention::scaled_dot_product_attention(dq, dk, dv, dout, options);
        ASSERT_TRUE(status.ok()) << status.message();
        memory.synchronize(stream);
        if (all_half) {
          memory.copy_span_to_host(dout, out.view());
          out.write_back();
        } else {
          memory.copy_to_host(dout, t.out);
        }
        memory.copy_to_host(dlse, t.lse);
        std::vector<double> want_out, want_lse;
        reference_sdpa(all_half ? q.rounded() : t.q.view(), k.rounded(), v.rounded(),
                       c.effective_scale(), &want_out, &want_lse, &options.mask);
        if (all_half) {
          EXPECT_TRUE(matches_half_reference(t.out.to_dense(), want_out, t.out.shape(), dtype));
        } else {
          EXPECT_TRUE(matches_reference(t.out.to_dense(), want_out, t.out.shape()));
        }
        EXPECT_TRUE(t.out.outside_view_holds(std::numeric_limits<float>::quiet_NaN()))
            << "in out's padding";
        EXPECT_TRUE(matches_reference(t.lse.to_dense(), want_lse, t.lse.shape(), Domain::Log));
      }
    }
    // convert_dtype on device tensors: q rounded on the GPU, then widened back.
    SdpaTensors t(sdpa_case(1, 3, 3, 50, 1, 40, 40), seed_for_current_test());
    HalfCopy want(t.q.view(), dtype);
    std::vector<uint16_t> bits(static_cast<size_t>(t.q.view().numel()), 0xdead);
    const attention::TensorView host_half =
        attention::TensorView::contiguous(bits.data(), dtype, {1, 3, 50, 40});
    const attention::TensorView dq = memory.copy_to_device(t.q),
                                dhalf = memory.copy_span_to_device(host_half);
    ASSERT_TRUE(attention::convert_dtype(dq, dhalf).ok());
    memory.copy_span_to_host(dhalf, host_half);
    const attention::TensorView rounded = want.rounded();
    for (size_t i = 0; i < bits.size(); ++i) {
      ASSERT_EQ(from_half_bits(bits[i], dtype), static_cast<const float*>(rounded.data)[i])
          << "element " << i;
    }
  }
}

// multi_head_attention on bfloat16 device tensors (input, weights, biases, out: widened into
// device scratch, out rounded on the device) against the same call on host tensors, whose half
// path the MHA suites check against the double reference: within two bfloat16 ulps (the two
// fp32 computations may round out differently).
TEST_F(CudaDevicePointers, HalfMhaMatchesHostCall) {
  const int64_t B = 2, S = 20, E = 64, H = 4;
  const uint64_t seed = seed_for_current_test();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Tensor x({1, B, S, E}), w_in({1, 1, 3 * E, E}), b_in({1, 1, 1, 3 * E}), w_out({1, 1, E, E}),
      b_out({1, 1, 1, E}), out({1, B, S, E}), out_host({1, B, S, E});
  for (Tensor* t : {&x, &w_in, &b_in, &w_out, &b_out}) t->fill_uniform(rng, -0.5f, 0.5f);
  out.poison();
  out_host.poison();
  const attention::DType bf16 = attention::DType::BFloat16;
  HalfCopy hx(x.view(), bf16), hw_in(w_in.view(), bf16), hb_in(b_in.view(), bf16),
      hw_out(w_out.view(), bf16), hb_out(b_out.view(), bf16), hout(out.view(), bf16),
      hout_host(out_host.view(), bf16);
  // The rank-4 test tensors as the API's ranks.
  const auto as_rank = [](attention::TensorView t, int rank) {
    const int drop = t.rank - rank;
    for (int d = 0; d < rank; ++d) {
      t.shape[d] = t.shape[d + drop];
      t.strides[d] = t.strides[d + drop];
    }
    t.rank = rank;
    return t;
  };
  const auto weights_of = [&](const attention::TensorView& wi, const attention::TensorView& bi,
                              const attention::TensorView& wo, const attention::TensorView& bo) {
    attention::MhaWeights w;
    w.in_proj_weight = as_rank(wi, 2);
    w.in_proj_bias = as_rank(bi, 1);
    w.out_proj_weight = as_rank(wo, 2);
    w.out_proj_bias = as_rank(bo, 1);
    return w;
  };
  attention::MhaOptions options;
  options.num_heads = H;
  options.mask.causal = attention::Causal::TopLeft;
  ASSERT_TRUE(attention::multi_head_attention(
                  as_rank(hx.view(), 3), as_rank(hx.view(), 3),
                  weights_of(hw_in.view(), hb_in.view(), hw_out.view(), hb_out.view()),
                  as_rank(hout_host.view(), 3), options)
                  .ok());
  hout_host.write_back();
  const attention::TensorView dx = memory.copy_span_to_device(as_rank(hx.view(), 3)),
                              dout = memory.copy_span_to_device(as_rank(hout.view(), 3));
  const attention::MhaWeights dw = weights_of(
      memory.copy_span_to_device(hw_in.view()), memory.copy_span_to_device(hb_in.view()),
      memory.copy_span_to_device(hw_out.view()), memory.copy_span_to_device(hb_out.view()));
  const attention::Status status = attention::multi_head_attention(dx, dx, dw, dout, options);
  ASSERT_TRUE(status.ok()) << status.message();
  memory.copy_span_to_host(dout, as_rank(hout.view(), 3));
  hout.write_back();
  const std::vector<float> got = out.to_dense(), want = out_host.to_dense();
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], std::max(1.0f, std::fabs(want[i])) * 0x1p-7f) << "out " << i;
  }
}

// Rotary embeddings on device tensors: apply_rotary_embedding (rope_f32_cuda) and SDPA with
// SdpaOptions::rope (q and k rotated into device scratch), against the same calls on the CPU.
TEST_F(CudaDevicePointers, RopeMatchesCpu) {
  const SdpaCase c = sdpa_case(2, 8, 2, 5, 300, 64, 64);
  const uint64_t seed = seed_for_current_test();
  SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
  SdpaTensors t(c, seed), cpu(c, seed);
  std::vector<int32_t> offsets = {7, 40000};
  attention::RopeOptions rope;
  rope.position_offsets =
      attention::TensorView::contiguous(offsets.data(), attention::DType::Int32, {2});
  // apply_rotary_embedding: k rotated on the device and on the CPU.
  Tensor rotated(t.k.shape()), rotated_cpu(t.k.shape());
  rotated.poison();
  ASSERT_TRUE(attention::apply_rotary_embedding(t.k.view(), rotated_cpu.view(), rope).ok());
  const attention::TensorView dk = memory.copy_to_device(t.k),
                              drotated = memory.copy_to_device(rotated);
  attention::Status status = attention::apply_rotary_embedding(dk, drotated, rope);
  ASSERT_TRUE(status.ok()) << status.message();
  memory.copy_to_host(drotated, rotated);
  const std::vector<float> got = rotated.to_dense(), want = rotated_cpu.to_dense();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f) << "element " << i;
  // SDPA with rope, causal: device tensors against the CPU's fused kernel.
  attention::SdpaOptions options;
  options.rope = rope;
  options.mask.causal = attention::Causal::BottomRight;
  t.out.poison();
  ASSERT_TRUE(attention::scaled_dot_product_attention(cpu.q.view(), cpu.k.view(), cpu.v.view(),
                                                      cpu.out.view(), options)
                  .ok());
  const attention::TensorView dq = memory.copy_to_device(t.q), dv = memory.copy_to_device(t.v),
                              dout = memory.copy_to_device(t.out);
  status = attention::scaled_dot_product_attention(dq, dk, dv, dout, options);
  ASSERT_TRUE(status.ok()) << status.message();
  memory.copy_to_host(dout, t.out);
  const std::vector<float> out = t.out.to_dense(), out_cpu = cpu.out.to_dense();
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], out_cpu[i], 2e-5f) << "out " << i;
}

// paged_attention on device pools, q, out and logsumexp (the block table and lengths stay on the
// host), Float32 and BFloat16 pools, against the same call on the CPU, in whole and in the
// smallest chunks, on a stream.
TEST_F(CudaDevicePointers, PagedMatchesCpu) {
  const int64_t B = 3, H = 8, Hkv = 2, Sq = 2, D = 64, block = 16, width = 12, blocks = 40;
  const uint64_t seed = seed_for_current_test();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Tensor q({B, H, Sq, D}), k({blocks, block, Hkv, D}), v({blocks, block, Hkv, D});
  for (Tensor* t : {&q, &k, &v}) t->fill_uniform(rng, -1.0f, 1.0f);
  std::vector<int32_t> ids(blocks), table(B * width, -1), seq_lens = {150, 1, 37};
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < (seq_lens[b] + block - 1) / block; ++n)
      table[b * width + n] = ids[next++];
  attention::SdpaOptions options;
  options.mask.causal = attention::Causal::BottomRight;
  void* const stream = memory.new_stream();
  for (attention::DType dtype : {attention::DType::Float32, attention::DType::BFloat16}) {
    for (int64_t limit : {int64_t{0}, int64_t{1}}) {
      SCOPED_TRACE(std::string(dtype == attention::DType::Float32 ? "Float32" : "BFloat16") +
                   (limit ? " pools, smallest chunks" : " pools"));
      HalfCopy hk(k.view(), attention::DType::BFloat16), hv(v.view(), attention::DType::BFloat16);
      const bool half = dtype != attention::DType::Float32;
      attention::PagedKvCache cache;
      cache.k = half ? hk.view() : k.view();
      cache.v = half ? hv.view() : v.view();
      cache.block_table = attention::TensorView::contiguous(table.data(), attention::DType::Int32,
                                                            {B, width});
      cache.seq_lens =
          attention::TensorView::contiguous(seq_lens.data(), attention::DType::Int32, {B});
      Tensor out({B, H, Sq, D}), lse({B, H, Sq}), out_cpu({B, H, Sq, D}), lse_cpu({B, H, Sq});
      out.poison();
      lse.poison();
      options.gpu = {};
      options.logsumexp = lse_cpu.view();
      ASSERT_TRUE(attention::paged_attention(q.view(), cache, out_cpu.view(), options).ok());
      attention::PagedKvCache device_cache = cache;
      device_cache.k = memory.copy_span_to_device(cache.k);
      device_cache.v = memory.copy_span_to_device(cache.v);
      const attention::TensorView dq = memory.copy_to_device(q), dout = memory.copy_to_device(out),
                                  dlse = memory.copy_to_device(lse);
      options.logsumexp = dlse;
      options.gpu.cuda_stream = stream;
      // 1: below any chunk; the least a chunk needs is named in the error, then used.
      if (limit) {
        options.gpu.workspace_limit = 1;
        const attention::Status refused =
            attention::paged_attention(dq, device_cache, dout, options);
        ASSERT_FALSE(refused.ok());
        const std::string message = refused.message();
        const size_t at = message.find("below the ");
        ASSERT_NE(at, std::string::npos) << message;
        options.gpu.workspace_limit = std::stoll(message.substr(at + 10));
      }
      const attention::Status status = attention::paged_attention(dq, device_cache, dout, options);
      ASSERT_TRUE(status.ok()) << status.message();
      memory.synchronize(stream);
      memory.copy_to_host(dout, out);
      memory.copy_to_host(dlse, lse);
      // Equal (a row without keys: out 0, logsumexp -inf) or within 1e-5.
      const auto expect_close = [](const Tensor& got, const Tensor& want, const char* name) {
        const std::vector<float> a = got.to_dense(), b = want.to_dense();
        for (size_t i = 0; i < a.size(); ++i) {
          if (a[i] != b[i]) {
            ASSERT_NEAR(a[i], b[i], 1e-5f) << name << " " << i;
          }
        }
      };
      expect_close(out, out_cpu, "out");
      expect_close(lse, lse_cpu, "logsumexp");
    }
  }
}

#if ATTENTION_TEST_GPU_MODS
// A mod kernel on device tensors (the example document mask, its document ids on the device too),
// on a stream: the CUDA kernels agree with the CPU kernels (AVX2) of the same mod.
TEST_F(CudaDevicePointers, ModMatchesCpu) {
  const int64_t B = 2, H = 4, Hkv = 2, Sq = 100, Sk = 160, D = 64;
  const uint64_t seed = seed_for_current_test();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Tensor q({B, H, Sq, D}), k({B, Hkv, Sk, D}), v({B, Hkv, Sk, D});
  for (Tensor* t : {&q, &k, &v}) t->fill_uniform(rng, -1.0f, 1.0f);
  std::vector<int32_t> ids = random_document_ids(B, Sk, 40, rng);
  const attention::TensorView host_ids =
      attention::TensorView::contiguous(ids.data(), attention::DType::Int32, {B, Sk});
  Tensor out({B, H, Sq, D}), lse({B, H, Sq}), out_cpu({B, H, Sq, D}), lse_cpu({B, H, Sq});
  out.poison();
  lse.poison();
  attention::SdpaOptions options;
  options.logsumexp = lse_cpu.view();
  const attention::ModKernels cpu{"document_mask",
                                  ATTENTION_MOD_KERNEL(mod_document_mask_prefill),
                                  {},
                                  ATTENTION_MOD_KERNEL(mod_document_mask_ranges)};
  ASSERT_TRUE(attention::mod_attention(
                  cpu, q.view(), k.view(), v.view(), out_cpu.view(),
                  {attention::ModArgument::of_tensor("document_ids", host_ids)}, options)
                  .ok());
  const attention::ModKernels cuda{"document_mask",
                                   ATTENTION_MOD_KERNEL(mod_document_mask_prefill_cuda),
                                   {},
                                   ATTENTION_MOD_KERNEL(mod_document_mask_ranges_cuda)};
  const attention::TensorView dq = memory.copy_to_device(q), dk = memory.copy_to_device(k),
                              dv = memory.copy_to_device(v), dout = memory.copy_to_device(out),
                              dlse = memory.copy_to_device(lse),
                              dids = memory.copy_span_to_device(host_ids);
  options.logsumexp = dlse;
  options.gpu.cuda_stream = memory.new_stream();
  const attention::Status status = attention::mod_attention(
      cuda, dq, dk, dv, dout, {attention::ModArgument::of_tensor("document_ids", dids)}, options);
  ASSERT_TRUE(status.ok()) << status.message();
  memory.synchronize(options.gpu.cuda_stream);
  memory.copy_to_host(dout, out);
  memory.copy_to_host(dlse, lse);
  for (const auto& [got, want] : {std::pair{&out, &out_cpu}, std::pair{&lse, &lse_cpu}}) {
    const std::vector<float> a = got->to_dense(), b = want->to_dense();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f) << i;
  }
}
#endif

// gpu.cuda_stream orders CUDA calls only: any other backend refuses it, naming the option and the
// backend, before writing anything.
TEST(CudaStream, OtherBackendsRefuseIt) {
  int stream = 0;
  for (Backend backend : {Backend::CPU, Backend::OpenCL}) {
    if (!attention::backend_available(backend).ok()) continue;
    SCOPED_TRACE(backend == Backend::CPU ? "CPU" : "OpenCL");
    SmallCall call;
    attention::SdpaOptions options;
    options.backend = backend;
    options.gpu.cuda_stream = &stream;
    const attention::Status status = attention::scaled_dot_product_attention(
        call.t.q.view(), call.t.k.view(), call.t.v.view(), call.t.out.view(), options);
    EXPECT_EQ(status.code(), attention::StatusCode::InvalidArgument);
    const std::string expected = std::string("gpu.cuda_stream: set, but the call runs on the ") +
                                 (backend == Backend::CPU ? "CPU" : "OpenCL") + " backend";
    EXPECT_NE(status.message().find(expected), std::string::npos) << status.message();
    EXPECT_TRUE(all_nan(call.t.out));
  }
}

// Halide's CUDA runtime asks the library's hook for the stream of each call: a call of the library
// gets its own (GpuOptions::cuda_stream), any other user_context (an application's pipeline) what
// Halide would give it, the default stream.
TEST(CudaStream, HookAnswersOurCallsOnly) {
  int stream = 0, application = 0;
  attention::detail::KernelCall call;
  call.cuda_stream = &stream;
  void* answer = nullptr;
  EXPECT_EQ(attention::detail::cuda_stream_of(&call, nullptr, &answer), 0);
  EXPECT_EQ(answer, &stream);
  answer = &application;
  EXPECT_EQ(attention::detail::cuda_stream_of(&application, nullptr, &answer), 0);
  EXPECT_EQ(answer, nullptr);
}

// A call on the caller's stream, queued behind the caller's copies there: device tensors (read
// after the stream is synchronized) and host tensors (the library waits for their copies back)
// both match the reference.
TEST(CudaStream, CallsOnAStreamMatchReference) {
  const attention::Status available = attention::backend_available(Backend::CUDA);
  if (!available.ok()) GTEST_SKIP() << available.message();
  CudaMemory memory;
  ASSERT_TRUE(memory.ready()) << "CUDA is available but device memory could not be set up";
  const SdpaCase c = sdpa_case(2, 8, 2, 3, 777, 64, 64);
  const uint64_t seed = seed_for_current_test();
  SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
  for (bool on_device : {true, false}) {
    SdpaTensors t(c, seed);
    t.out.poison();
    attention::SdpaOptions options;
    options.backend = Backend::CUDA;
    options.gpu.cuda_stream = memory.new_stream();
    if (on_device) {
      const attention::TensorView dq = memory.copy_to_device(t.q), dk = memory.copy_to_device(t.k),
                                  dv = memory.copy_to_device(t.v),
                                  dout = memory.copy_to_device(t.out);
      const attention::Status status =
          attention::scaled_dot_product_attention(dq, dk, dv, dout, options);
      ASSERT_TRUE(status.ok()) << status.message();
      memory.synchronize(options.gpu.cuda_stream);
      memory.copy_to_host(dout, t.out);
    } else {
      const attention::Status status = attention::scaled_dot_product_attention(
          t.q.view(), t.k.view(), t.v.view(), t.out.view(), options);
      ASSERT_TRUE(status.ok()) << status.message();
    }
    std::vector<double> reference_out;
    reference_sdpa(t.q.view(), t.k.view(), t.v.view(), c.effective_scale(), &reference_out, nullptr,
                   nullptr);
    EXPECT_TRUE(matches_reference(t.out.to_dense(), reference_out, t.out.shape()))
        << (on_device ? "device tensors" : "host tensors");
  }
}

// The chunk plans of GPU calls (no GPU needed): every (batch, head, row) in exactly one chunk,
// each chunk's split results within the limit, rows from whole query tiles, heads in whole units
// (GQA groups; MHA's every head); one chunk when the call fits; an error below the least chunk.
TEST(GpuWorkspace, ChunkPlansCoverEveryRowOnceWithinTheLimit) {
  using attention::detail::GpuChunk;
  using attention_contract::gpu_split_workspace_bytes;
  const attention_contract::GpuTiling prefill =
      attention_contract::gpu_tiling(attention_contract::GpuApi::CUDA, true);
  // 4×12×4096²×64: 2 planes × 128 features (a pass of 32 × 4) × 64 splits × 4096 rows × 48 heads.
  EXPECT_EQ(gpu_split_workspace_bytes(48, 4096, 4096, 64, prefill),
            int64_t{2} * 128 * 64 * 4096 * 48 * 4);
  struct Shape {
    int64_t B, H, unit, Sq, Sk, Dv;
  };
  std::mt19937_64 rng(seed_for_current_test());
  for (const Shape& s : {Shape{3, 8, 2, 300, 1000, 64}, Shape{2, 6, 6, 130, 70, 40},
                         Shape{4, 4, 1, 1, 5000, 128}, Shape{1, 2, 1, 64, 64, 256}}) {
    const attention_contract::GpuTiling t =
        attention_contract::gpu_tiling(attention_contract::GpuApi::CUDA, s.Sq > 2);
    const int64_t whole = gpu_split_workspace_bytes(s.B * s.H, s.Sq, s.Sk, s.Dv, t);
    const int64_t least = gpu_split_workspace_bytes(s.unit, 1, s.Sk, s.Dv, t);
    std::vector<int64_t> limits = {whole,       whole - 1,        least, least + 1, 2 * least,
                                   s.H * least, s.B * s.H * least};
    for (int n = 0; n < 20; ++n) {
      limits.push_back(std::uniform_int_distribution<int64_t>(least, whole)(rng));
    }
    for (int64_t limit : limits) {
      SCOPED_TRACE("B=" + std::to_string(s.B) + " H=" + std::to_string(s.H) +
                   " unit=" + std::to_string(s.unit) + " Sq=" + std::to_string(s.Sq) +
                   " limit=" + std::to_string(limit));
      attention::GpuOptions gpu;
      gpu.workspace_limit = limit;
      std::vector<GpuChunk> chunks;
      ASSERT_TRUE(attention::detail::plan_gpu_chunks(t, s.B, s.H, s.Sq, s.Sk, s.Dv, gpu, "gpu",
                                                     s.unit, &chunks)
                      .ok());
      if (limit >= whole) {
        EXPECT_EQ(chunks.size(), 1u);
      }
      std::vector<int> seen(static_cast<size_t>(s.B * s.H * s.Sq), 0);
      for (const GpuChunk& c : chunks) {
        EXPECT_LE(gpu_split_workspace_bytes(c.batches * c.heads, c.rows, s.Sk, s.Dv, t), limit);
        EXPECT_EQ(c.row % t.query_tile, 0);
        EXPECT_EQ(c.head % s.unit, 0);
        EXPECT_EQ(c.heads % s.unit, 0);
        for (int64_t b = c.batch; b < c.batch + c.batches; ++b) {
          for (int64_t h = c.head; h < c.head + c.heads; ++h) {
            for (int64_t i = c.row; i < c.row + c.rows; ++i) ++seen[(b * s.H + h) * s.Sq + i];
          }
        }
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    }
    attention::GpuOptions gpu;
    gpu.workspace_limit = least - 1;
    std::vector<GpuChunk> chunks;
    const attention::Status status = attention::detail::plan_gpu_chunks(
        t, s.B, s.H, s.Sq, s.Sk, s.Dv, gpu, "options.gpu", s.unit, &chunks);
    EXPECT_EQ(status.code(), attention::StatusCode::InvalidArgument);
    EXPECT_NE(status.message().find("options.gpu.workspace_limit: " + std::to_string(least - 1) +
                                    " bytes is below the " + std::to_string(least)),
              std::string::npos)
        << status.message();
  }
}

// A negative limit is refused for every backend, naming the option; nothing is written.
TEST(GpuWorkspace, NegativeLimitIsAnError) {
  SmallCall call;
  attention::SdpaOptions options;
  options.gpu.workspace_limit = -1;
  const attention::Status status = attention::scaled_dot_product_attention(
      call.t.q.view(), call.t.k.view(), call.t.v.view(), call.t.out.view(), options);
  EXPECT_EQ(status.code(), attention::StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("gpu.workspace_limit: must be >= 0"), std::string::npos)
      << status.message();
  EXPECT_TRUE(all_nan(call.t.out));
}

// The GPU backend available here (OpenCL on PoCL in CI), or none.
std::optional<Backend> gpu_backend() {
  for (Backend backend : {Backend::OpenCL, Backend::CUDA}) {
    if (attention::backend_available(backend).ok()) return backend;
  }
  return std::nullopt;
}

// A case's tensors (inputs drawn from `seed`) and its options on `backend`: the masks of `spec`
// (none for nullptr, drawn from seed + 1) and logsumexp when the case asks for it. Not movable:
// the options point into the tensors and masks.
struct BackendCall {
  BackendCall(const SdpaCase& c, const MaskSpec* spec, Backend backend, uint64_t seed)
      : t(c, seed) {
    options.backend = backend;
    if (spec) {
      masks.emplace(*spec, c, seed + 1);
      options.mask = masks->options;
    }
    if (c.logsumexp) options.logsumexp = t.lse.view();
  }
  BackendCall(const BackendCall&) = delete;
  BackendCall& operator=(const BackendCall&) = delete;

  SdpaTensors t;
  std::optional<MaskTensors> masks;
  attention::SdpaOptions options;
};

// Calls in chunks give the whole call's results bit for bit: each row, head and batch is
// computed by the same kernel code whichever chunk holds it. SDPA with GQA, masks whose arguments
// follow a chunk's rows (bottom-right causal with a window, query and key lengths, a boolean mask
// per batch, ALiBi), logsumexp given or not, and decode; limits that chunk by rows, by heads and
// by batches, and one below the least chunk (an error, out untouched).
TEST(GpuWorkspace, ChunkedCallsMatchWholeCalls) {
  const std::optional<Backend> backend = gpu_backend();
  if (!backend) GTEST_SKIP() << "no GPU backend available here";
  const uint64_t seed = seed_for_current_test();
  MaskSpec rows_masks;
  rows_masks.causal = attention::Causal::BottomRight;
  rows_masks.window = 90;
  rows_masks.query_lengths = rows_masks.key_lengths = true;
  MaskSpec tensor_masks;
  const MaskSpec* const specs[] = {nullptr, &rows_masks, &tensor_masks};
  tensor_masks.bool_mask = tensor_masks.mask_head_broadcast = true;
  tensor_masks.alibi = true;
  for (const SdpaCase& base :
       {sdpa_case(2, 4, 2, 150, 200, 32, 40), sdpa_case(3, 4, 4, 1, 300, 16, 16)}) {
    for (const MaskSpec* spec : specs) {
      SdpaCase c = base;
      c.logsumexp = spec != &tensor_masks;
      SCOPED_TRACE(describe(c) + (spec ? ", " + describe(*spec) : "") + ", " + seed_note(seed));
      BackendCall call(c, spec, *backend, seed);
      SdpaTensors& t = call.t;
      attention::SdpaOptions& options = call.options;
      const auto run = [&](int64_t limit) {
        t.out.poison();
        t.lse.poison();
        options.gpu.workspace_limit = limit;
        return attention::scaled_dot_product_attention(t.q.view(), t.k.view(), t.v.view(),
                                                       t.out.view(), options);
      };
      ASSERT_TRUE(run(0).ok());
      const std::vector<float> whole_out = t.out.to_dense(), whole_lse = t.lse.to_dense();
      std::vector<double> reference_out, reference_lse;
      reference_sdpa(t.q.view(), t.k.view(), t.v.view(), c.effective_scale(), &reference_out,
                     &reference_lse, spec ? &options.mask : nullptr);
      EXPECT_TRUE(matches_reference(whole_out, reference_out, t.out.shape()));
      const int64_t least =
          smallest_gpu_workspace(*backend, c.H / c.Hkv, c.Sq, c.Sk, c.Dv, spec != nullptr);
      // One tile of every head (rows), one group of heads (heads), every head of a batch.
      for (int64_t limit : {c.B * c.H * least, least, c.H * least}) {
        SCOPED_TRACE("workspace_limit " + std::to_string(limit));
        const attention::Status status = run(limit);
        ASSERT_TRUE(status.ok()) << status.message();
        EXPECT_TRUE(same_bits(t.out.to_dense(), whole_out)) << "in out";
        if (c.logsumexp) {
          EXPECT_TRUE(same_bits(t.lse.to_dense(), whole_lse)) << "in logsumexp";
        }
        EXPECT_TRUE(t.out.outside_view_holds(std::numeric_limits<float>::quiet_NaN()));
      }
      const attention::Status status = run(least - 1);
      EXPECT_EQ(status.code(), attention::StatusCode::InvalidArgument);
      EXPECT_NE(status.message().find("gpu.workspace_limit"), std::string::npos);
      EXPECT_TRUE(all_nan(t.out));
    }
  }
}

// detail::gqa_rows: a GQA decode call's query heads as rows of their kv head. Head kv·group + g's
// row i is row g·Sq + i of kv head kv, in the views' own strides.
TEST(GpuGqaRows, GroupHeadsBecomeRowsOfTheirKvHead) {
  using attention::TensorView;
  float storage = 0.0f;
  // One row per head, heads 40 floats apart (padded): rows step by the head stride.
  const TensorView q = TensorView::strided(&storage, {2, 8, 1, 32}, {320, 40, 40, 1});
  const TensorView out = TensorView::contiguous(&storage, {2, 8, 1, 24});
  const TensorView lse = TensorView::contiguous(&storage, {2, 8, 1});
  attention::MaskOptions mask;
  mask.causal = attention::Causal::BottomRight;  // one row: it sees every key
  mask.softcap = 30.0f;
  attention::detail::GqaRows rows;
  ASSERT_TRUE(attention::detail::gqa_rows(q, out, lse, mask, 4, &rows));
  using Dims = std::array<int64_t, attention::kMaxRank>;
  EXPECT_EQ(rows.q.shape, (Dims{2, 2, 4, 32}));
  EXPECT_EQ(rows.q.strides, (Dims{320, 160, 40, 1}));
  EXPECT_EQ(rows.out.shape, (Dims{2, 2, 4, 24}));
  EXPECT_EQ(rows.out.strides, (Dims{192, 96, 24, 1}));
  EXPECT_EQ(rows.lse.rank, 3);
  EXPECT_EQ((Dims{rows.lse.shape[0], rows.lse.shape[1], rows.lse.shape[2], 0}), (Dims{2, 2, 4, 0}));
  EXPECT_EQ((Dims{rows.lse.strides[0], rows.lse.strides[1], rows.lse.strides[2], 0}),
            (Dims{8, 4, 1, 0}));
  EXPECT_EQ(rows.mask.causal, attention::Causal::None);
  EXPECT_EQ(rows.mask.softcap, 30.0f);

  // Two rows packed per head: rows keep their stride, kv heads step over the group's heads.
  const TensorView q2 = TensorView::contiguous(&storage, {1, 6, 2, 16});
  const TensorView out2 = TensorView::contiguous(&storage, {1, 6, 2, 16});
  attention::detail::GqaRows rows2;
  ASSERT_TRUE(attention::detail::gqa_rows(q2, out2, TensorView{}, {}, 3, &rows2));
  EXPECT_EQ(rows2.q.shape, (Dims{1, 2, 6, 16}));
  EXPECT_EQ(rows2.q.strides, (Dims{192, 96, 16, 1}));
  EXPECT_EQ(rows2.lse.data, nullptr);
}

// Calls whose rows differ by head or position, that are not decode, without GQA, or whose heads
// and rows do not continue one stride keep the per-head path.
TEST(GpuGqaRows, OnlyCallsWhoseRowsAreAlike) {
  using attention::TensorView;
  float storage = 0.0f;
  const TensorView q = TensorView::contiguous(&storage, {1, 8, 1, 16});
  const TensorView q2 = TensorView::contiguous(&storage, {1, 8, 2, 16});
  attention::detail::GqaRows rows;
  const auto alike = [&](const attention::MaskOptions& mask, const TensorView& view,
                         int64_t group) {
    return attention::detail::gqa_rows(view, view, TensorView{}, mask, group, &rows);
  };
  attention::MaskOptions none, key_lengths;
  int32_t lengths[1] = {5};
  key_lengths.key_lengths = TensorView::contiguous(lengths, attention::DType::Int32, {1});
  EXPECT_TRUE(alike(none, q, 4));
  EXPECT_TRUE(alike(key_lengths, q, 2));
  EXPECT_FALSE(alike(none, q, 1)) << "no GQA";
  EXPECT_FALSE(alike(none, TensorView::contiguous(&storage, {1, 8, 3, 16}), 4))
      << "three rows: the prefill kernel's call";
  attention::MaskOptions mask;
  mask.causal = attention::Causal::BottomRight;
  EXPECT_FALSE(alike(mask, q2, 4)) << "bottom-right causal of two rows";
  mask.causal = attention::Causal::TopLeft;
  EXPECT_FALSE(alike(mask, q, 4)) << "top-left causal";
  mask.causal = attention::Causal::BottomRight;
  mask.window = 8;
  EXPECT_FALSE(alike(mask, q, 4)) << "a window";
  mask = {};
  mask.alibi = true;
  EXPECT_FALSE(alike(mask, q, 4)) << "ALiBi slopes per head";
  mask = {};
  mask.query_lengths = key_lengths.key_lengths;
  EXPECT_FALSE(alike(mask, q, 4)) << "query lengths";
  mask = {};
  uint8_t hidden[8] = {};
  mask.bool_mask = TensorView::contiguous(hidden, attention::DType::Bool, {1, 8, 1, 1});
  EXPECT_FALSE(alike(mask, q, 4)) << "a mask tensor";
  // [B, S, H, D] memory order: two rows of a head are not one stride from the next head's.
  EXPECT_FALSE(alike(none, TensorView::strided(&storage, {1, 8, 2, 16}, {256, 16, 128, 1}), 4));
  // A logsumexp whose heads are not adjacent would give the kernel rows that are not dense.
  const TensorView padded_lse = TensorView::strided(&storage, {1, 8, 1}, {64, 4, 1});
  EXPECT_FALSE(attention::detail::gqa_rows(q, q, padded_lse, none, 4, &rows));
  EXPECT_TRUE(attention::detail::gqa_rows(q, q, TensorView::contiguous(&storage, {1, 8, 1}), none,
                                          4, &rows));
}

// GQA decode on the GPU backend here (PoCL's OpenCL in CI) against the double reference: dense,
// padded and position-major views, one and two rows, with no mask, key lengths with softcap, and
// bottom-right causal (of one row: the heads as rows; of two: per head), logsumexp given.
TEST(GpuGqaRows, DecodeMatchesReference) {
  const std::optional<Backend> backend = gpu_backend();
  if (!backend) GTEST_SKIP() << "no GPU backend available here";
  const uint64_t seed = seed_for_current_test();
  MaskSpec lengths;
  lengths.key_lengths = true;
  lengths.softcap = 20.0f;
  MaskSpec causal;
  causal.causal = attention::Causal::BottomRight;
  causal.key_lengths = true;
  const MaskSpec* const specs[] = {nullptr, &lengths, &causal};
  for (Layout layout : kAllLayouts) {
    for (int64_t Sq : {1, 2}) {
      for (const MaskSpec* spec : specs) {
        SdpaCase c = sdpa_case(2, 8, 2, Sq, 300, 32, 24).layout(layout).with_logsumexp();
        SCOPED_TRACE(describe(c) + (spec ? ", " + describe(*spec) : "") + ", " + seed_note(seed));
        BackendCall call(c, spec, *backend, seed);
        SdpaTensors& t = call.t;
        const attention::SdpaOptions& options = call.options;
        // Dense views run as rows except bottom-right causal of two rows.
        attention::detail::GqaRows rows;
        const bool as_rows = attention::detail::gqa_rows(t.q.view(), t.out.view(), t.lse.view(),
                                                         options.mask, c.H / c.Hkv, &rows);
        if (layout == Layout::kDense) {
          EXPECT_EQ(as_rows, Sq == 1 || spec != &causal);
        }
        t.out.poison();
        t.lse.poison();
        const attention::Status status = attention::scaled_dot_product_attention(
            t.q.view(), t.k.view(), t.v.view(), t.out.view(), options);
        ASSERT_TRUE(status.ok()) << status.message();
        std::vector<double> reference_out, reference_lse;
        reference_sdpa(t.q.view(), t.k.view(), t.v.view(), c.effective_scale(), &reference_out,
                       &reference_lse, spec ? &options.mask : nullptr);
        EXPECT_TRUE(matches_reference(t.out.to_dense(), reference_out, t.out.shape()));
        EXPECT_TRUE(matches_reference(t.lse.to_dense(), reference_lse, t.lse.shape(), Domain::Log))
            << "in logsumexp";
        EXPECT_TRUE(t.out.outside_view_holds(std::numeric_limits<float>::quiet_NaN()));
        EXPECT_TRUE(t.lse.outside_view_holds(std::numeric_limits<float>::quiet_NaN()));
      }
    }
  }
}

#if ATTENTION_TEST_GPU
// Small host inputs reach the device together (GpuCall stages them: one transfer into one
// allocation, each input a device crop of it at its own offset): read back from the device, every
// input holds its own elements, a broadcast (stride-0) one included, within one chunk and across
// the chunks' boundary; an input past kStagedInputBytes is left host-dirty for Halide's own copy.
class GpuStaging : public ::testing::TestWithParam<Backend> {};

TEST_P(GpuStaging, SmallInputsShareOneTransfer) {
  const attention::Status available = attention::backend_available(GetParam());
  if (!available.ok()) GTEST_SKIP() << available.message();
  using attention::detail::Run;
  const uint64_t seed = seed_for_current_test();
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> ints(-1000000, 1000000);
  const auto fill = [&](std::vector<int32_t>& v) {
    for (int32_t& x : v) x = ints(rng);
  };
  // Sizes that leave each piece's end off the pieces' alignment; the broadcast's one element
  // stands for [5, 7] (strides 0).
  std::vector<int32_t> table(3 * 37), lengths(5), one(1), chunked(301),
      large(attention::detail::kStagedInputBytes / sizeof(int32_t) + 1);
  for (auto* v : {&table, &lengths, &one, &chunked, &large}) fill(*v);
  auto dense = [](std::vector<int32_t>& v, std::vector<halide_dimension_t>& dims) {
    halide_buffer_t b{};
    b.host = reinterpret_cast<uint8_t*>(v.data());
    b.type = halide_type_t(halide_type_int, 32);
    b.dimensions = static_cast<int32_t>(dims.size());
    b.dim = dims.data();
    return b;
  };
  std::vector<halide_dimension_t> table_dims = {{0, 37, 1}, {0, 3, 37}}, lengths_dims = {{0, 5, 1}},
                                  one_dims = {{0, 5, 0}, {0, 7, 0}}, chunked_dims = {{0, 301, 1}},
                                  large_dims = {{0, static_cast<int32_t>(large.size()), 1}};
  halide_buffer_t b_table = dense(table, table_dims), b_lengths = dense(lengths, lengths_dims),
                  b_one = dense(one, one_dims), b_chunked = dense(chunked, chunked_dims),
                  b_large = dense(large, large_dims);
  const Device host = Device::CPU;
  {
    attention::detail::GpuCall call(GetParam() == Backend::CUDA ? Run::CUDA : Run::OpenCL);
    for (halide_buffer_t* b : {&b_table, &b_lengths, &b_one, &b_large}) {
      ASSERT_TRUE(call.input(b, host).ok());
    }
    ASSERT_TRUE(call.begin_chunk().ok());  // the inputs before the chunk are staged here
    ASSERT_TRUE(call.input(&b_chunked, host).ok());
    EXPECT_EQ(b_chunked.device, 0u) << "a chunk's inputs are staged by its run";
    EXPECT_TRUE(b_large.host_dirty()) << "the large input is Halide's to copy";
    EXPECT_EQ(b_large.device, 0u);
    // What the device holds, read back over poisoned host copies.
    auto expect_device_holds = [&](halide_buffer_t& b, std::vector<int32_t>& v, const char* name) {
      ASSERT_NE(b.device, 0u) << name << " has no device copy";
      const std::vector<int32_t> expected = v;
      std::fill(v.begin(), v.end(), -1);
      b.set_device_dirty(true);
      ASSERT_EQ(halide_copy_to_host(nullptr, &b), 0) << name;
      EXPECT_EQ(v, expected) << name << ", " << seed_note(seed);
    };
    // The chunk's "kernel" reads its input back where a kernel would run.
    const attention::Status ran = call.run("staging check", [&](void*) {
      expect_device_holds(b_chunked, chunked, "chunk input");
      return 0;
    });
    ASSERT_TRUE(ran.ok()) << ran.message();
    EXPECT_EQ(b_chunked.device, 0u) << "the chunk's end releases its crop";
    expect_device_holds(b_table, table, "table");
    expect_device_holds(b_lengths, lengths, "lengths");
    expect_device_holds(b_one, one, "broadcast");
  }
  for (const halide_buffer_t* b : {&b_table, &b_lengths, &b_one}) {
    EXPECT_EQ(b->device, 0u) << "the call's end releases the crops";
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuStaging, ::testing::Values(Backend::OpenCL, Backend::CUDA),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return std::string(info.param == Backend::CUDA ? "CUDA" : "OpenCL");
                         });
#endif  // ATTENTION_TEST_GPU

}  // namespace
}  // namespace attention_test
