// Half precision beyond the suites' all-half mode (ATTENTION_TEST_DTYPE): the conversion kernels
// against the reference conversions (every Float16 and BFloat16 value widened; special, boundary
// and random values rounded), fp32 queries and outputs over a half KV cache (the native decode
// kernels and the widening path), mixed types, the native bf16 prefill, and the errors.
#include "execute/half_precision.h"

#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "kernels/kernel_table.h"
#include "reference/sdpa_reference.h"
#include "test_util.h"

namespace attention_test {
namespace {

using attention::DType;
using attention::TensorView;

constexpr DType kHalfTypes[] = {DType::Float16, DType::BFloat16};

const char* name(DType dtype) { return dtype == DType::Float16 ? "Float16" : "BFloat16"; }

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// A conversion between two validated views: the CPU's (detail::convert) or a GPU backend's.
using Converter = std::function<attention::Status(const TensorView&, const TensorView&)>;

attention::Status cpu_convert(const TensorView& from, const TensorView& to) {
  return attention::detail::convert(from, to);
}

// Every one of the 65536 half values widens to the fp32 value it denotes (NaNs to NaN).
void expect_every_half_value_widens_exactly(const Converter& convert = cpu_convert) {
  for (DType dtype : kHalfTypes) {
    SCOPED_TRACE(name(dtype));
    std::vector<uint16_t> half(65536);
    for (size_t i = 0; i < half.size(); ++i) half[i] = static_cast<uint16_t>(i);
    std::vector<float> wide(half.size(), std::numeric_limits<float>::quiet_NaN());
    // Shaped [4, 16384] with padded rows on the fp32 side (strides the kernel must honour).
    std::vector<float> padded(4 * 16400, -7.0f);
    TensorView from = TensorView::contiguous(half.data(), dtype, {4, 16384});
    TensorView to = TensorView::strided(padded.data(), DType::Float32, {4, 16384}, {16400, 1});
    const attention::Status status = convert(from, to);
    ASSERT_TRUE(status.ok()) << status.message();
    int64_t mismatches = 0;
    for (size_t i = 0; i < half.size(); ++i) {
      const float got = padded[(i / 16384) * 16400 + i % 16384];
      const float want = from_half_bits(half[i], dtype);
      const bool same = std::isnan(want)
                            ? std::isnan(got) && std::signbit(got) == std::signbit(want)
                            : bits_of(got) == bits_of(want);
      if (!same && mismatches++ < 5) {
        ADD_FAILURE() << "bits 0x" << std::hex << half[i] << ": got " << got << ", want " << want;
      }
    }
    EXPECT_EQ(mismatches, 0);
    for (int64_t row = 0; row < 4; ++row) {
      for (int64_t x = 16384; x < 16400; ++x) EXPECT_EQ(padded[row * 16400 + x], -7.0f);
    }
  }
}

// Rounding to a half type: ties to even, overflow to ±inf (Float16 beyond 65504 + half an ulp),
// subnormals, signed zeros, infinities and NaN, and a million random bit patterns (NaNs among
// them with every kind of payload).
void expect_rounding_to_nearest_even(uint64_t seed, const Converter& convert = cpu_convert) {
  std::vector<float> values = {
      0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.996f, 65520.0f, -65520.0f, 70000.0f, 1e30f, -1e30f,
      6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 8.940697e-08f, 1e-45f, -3e-6f,
      std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
      // 1 + 2^-11 and 1 + 3·2^-11 (f16 ties), 1 + 2^-8, 1 + 3·2^-8
      // (bf16 ties), and just above and below them.
      1.00048828125f, 1.00146484375f, 1.00390625f, 1.01171875f,
      float_of(bits_of(1.00048828125f) + 1), float_of(bits_of(1.00390625f) - 1)};
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(seed_note(seed));
  while (values.size() < (1u << 20)) values.push_back(float_of(static_cast<uint32_t>(rng())));
  const auto n = static_cast<int64_t>(values.size());
  for (DType dtype : kHalfTypes) {
    SCOPED_TRACE(name(dtype));
    std::vector<uint16_t> half(values.size(), 0xdead);
    const attention::Status status =
        convert(TensorView::contiguous(values.data(), DType::Float32, {1, n}),
                TensorView::contiguous(half.data(), dtype, {1, n}));
    ASSERT_TRUE(status.ok()) << status.message();
    int64_t mismatches = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t want = to_half_bits(values[i], dtype);
      const bool nan = std::isnan(values[i]);
      const bool same =
          nan ? std::isnan(from_half_bits(half[i], dtype)) && (half[i] & 0x8000) == (want & 0x8000)
              : half[i] == want;
      if (!same && mismatches++ < 5) {
        ADD_FAILURE() << values[i] << " (0x" << std::hex << bits_of(values[i]) << "): got 0x"
                      << half[i] << ", want 0x" << want;
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

}  // namespace

void expect_conversions_match_reference(uint64_t seed) {
  expect_every_half_value_widens_exactly();
  expect_rounding_to_nearest_even(seed);
}

namespace {

TEST(HalfConversion, MatchesReferenceConversions) {
  expect_conversions_match_reference(seed_for_current_test());
}

// The GPU backends with kernels and a device here (OpenCL on PoCL in CI; CUDA with a GPU).
std::vector<attention::Backend> gpu_backends() {
  std::vector<attention::Backend> backends;
  for (attention::Backend b : {attention::Backend::OpenCL, attention::Backend::CUDA}) {
    if (attention::backend_available(b).ok()) backends.push_back(b);
  }
  return backends;
}

// The GPU convert kernels (raw 16-bit words converted in integer operations, so no device needs
// half support) give the reference conversions' results: every half value widened, the special,
// boundary and random values rounded; NaNs stay NaNs of the same sign.
TEST(GpuHalf, ConversionsMatchReference) {
  const auto backends = gpu_backends();
  if (backends.empty()) GTEST_SKIP() << "no GPU backend here";
  for (attention::Backend backend : backends) {
    SCOPED_TRACE(backend == attention::Backend::CUDA ? "CUDA" : "OpenCL");
    attention::DeviceOptions options;
    options.backend = backend;
    const Converter on_gpu = [&](const TensorView& from, const TensorView& to) {
      return attention::convert_dtype(from, to, options);
    };
    expect_every_half_value_widens_exactly(on_gpu);
    expect_rounding_to_nearest_even(seed_for_current_test(), on_gpu);
  }
}

// The reference conversions themselves, on values whose encodings are known.
TEST(HalfConversion, ReferenceEncodings) {
  EXPECT_EQ(to_half_bits(1.0f, DType::Float16), 0x3c00);
  EXPECT_EQ(to_half_bits(65504.0f, DType::Float16), 0x7bff);
  EXPECT_EQ(to_half_bits(65520.0f, DType::Float16), 0x7c00);
  EXPECT_EQ(to_half_bits(5.9604645e-08f, DType::Float16), 0x0001);  // smallest subnormal
  EXPECT_EQ(to_half_bits(2.9802322e-08f, DType::Float16), 0x0000);  // half of it: tie to even
  EXPECT_EQ(to_half_bits(-2.0f, DType::Float16), 0xc000);
  EXPECT_EQ(to_half_bits(1.0f, DType::BFloat16), 0x3f80);
  EXPECT_EQ(to_half_bits(1.00390625f, DType::BFloat16), 0x3f80);  // tie to even
  EXPECT_EQ(to_half_bits(1.01171875f, DType::BFloat16), 0x3f82);  // tie to even (up)
  EXPECT_EQ(to_half_bits(std::numeric_limits<float>::max(), DType::BFloat16), 0x7f80);
  EXPECT_EQ(from_half_bits(0x0001, DType::Float16), 5.9604645e-08f);
  EXPECT_EQ(from_half_bits(0xfc00, DType::Float16), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(from_half_bits(0x7e00, DType::Float16)));
  EXPECT_EQ(from_half_bits(0xc000, DType::BFloat16), -2.0f);
}

// The CPU and every GPU backend here (host tensors).
std::vector<attention::Backend> every_backend() {
  std::vector<attention::Backend> backends = {attention::Backend::CPU};
  for (attention::Backend b : gpu_backends()) backends.push_back(b);
  return backends;
}

const char* name(attention::Backend backend) {
  return backend == attention::Backend::CPU    ? "CPU"
         : backend == attention::Backend::CUDA ? "CUDA"
                                               : "OpenCL";
}

// fp32 q and out over a half KV cache (the llama.cpp layout): decode shapes take the kernels that
// read k and v as stored (on the CPU and the GPUs), the others widen them; both with and without
// masks, GQA, strided caches, logsumexp. The output is fp32, so the fp32 rule applies against the
// reference on the rounded cache.
TEST(HalfKvCache, Fp32QueriesOverHalfCacheMatchReference) {
  const uint64_t seed = seed_for_current_test();
  const SdpaCase cases[] = {
      sdpa_case(1, 8, 2, 1, 300, 64, 64).with_logsumexp(),
      sdpa_case(2, 4, 4, 2, 129, 128, 128).layout(Layout::kPadded),
      sdpa_case(1, 6, 3, 1, 1000, 40, 24)
          .layouts(Layout::kDense, Layout::kBSHD, Layout::kSHBD, Layout::kDense),
      sdpa_case(1, 4, 1, 70, 90, 32, 32).with_logsumexp(),    // prefill: the widening path
      sdpa_case(2, 8, 2, 1, 301, 128, 128).with_logsumexp(),  // GQA decode as rows (CPU)
  };
  MaskSpec causal_padding;
  causal_padding.causal = attention::Causal::BottomRight;
  causal_padding.key_lengths = true;
  causal_padding.additive_mask = true;
  MaskSpec lengths;  // one that GQA decode as rows keeps
  lengths.key_lengths = true;
  lengths.softcap = 20.0f;
  for (attention::Backend backend : every_backend()) {
    for (DType dtype : kHalfTypes) {
      for (const SdpaCase& c : cases) {
        if (backend != attention::Backend::CPU) {  // the GPU decode kernels over a half cache
          const auto run = backend == attention::Backend::CUDA ? attention::detail::Run::CUDA
                                                               : attention::detail::Run::OpenCL;
          EXPECT_EQ(attention::detail::gpu_half_kv_decode(run, dtype, dtype, c.Sq, c.Sk) != nullptr,
                    c.Sq <= 2)
              << describe(c);
        }
        const MaskSpec* const specs[] = {nullptr, &causal_padding, &lengths};
        for (const MaskSpec* spec : specs) {
          SCOPED_TRACE(std::string(name(backend)) + ", " + name(dtype) + " cache, " + describe(c) +
                       ", " + (spec ? describe(*spec) : "no mask") + ", " + seed_note(seed));
          SdpaTensors t(c, seed);
          std::optional<MaskTensors> masks;
          if (spec) masks.emplace(*spec, c, seed);
          HalfCopy k(t.k.view(), dtype), v(t.v.view(), dtype);
          t.out.poison();
          t.lse.poison();
          attention::SdpaOptions options;
          options.backend = backend;
          options.scale = c.scale;
          if (masks) options.mask = masks->options;
          if (c.logsumexp) options.logsumexp = t.lse.view();
          const attention::Status status = attention::scaled_dot_product_attention(
              t.q.view(), k.view(), v.view(), t.out.view(), options);
          ASSERT_TRUE(status.ok()) << status.message();
          std::vector<double> want_out, want_lse;
          reference_sdpa(t.q.view(), k.rounded(), v.rounded(), c.effective_scale(), &want_out,
                         c.logsumexp ? &want_lse : nullptr, masks ? &masks->options : nullptr);
          EXPECT_TRUE(matches_reference(t.out.to_dense(), want_out, t.out.shape()));
          EXPECT_TRUE(t.out.outside_view_holds(std::numeric_limits<float>::quiet_NaN()));
          if (c.logsumexp) {
            EXPECT_TRUE(matches_reference(t.lse.to_dense(), want_lse, t.lse.shape(), Domain::Log));
          }
        }
      }
    }
  }
}

// Any mix of fp32, Float16 and BFloat16 operands (each rounded to its own type), including a
// Float16 output of a BFloat16 cache and a half additive mask with fp32 operands, on the CPU and
// every GPU backend here.
TEST(HalfKvCache, MixedTypesMatchReference) {
  const uint64_t seed = seed_for_current_test();
  struct Mix {
    DType q, k, v, out;
  };
  const DType f32 = DType::Float32, f16 = DType::Float16, bf16 = DType::BFloat16;
  const Mix mixes[] = {
      {f16, bf16, bf16, f32}, {bf16, f16, f16, f16}, {f32, f16, bf16, bf16}, {f16, f32, f32, f32}};
  MaskSpec additive;
  additive.additive_mask = true;
  for (attention::Backend backend : every_backend()) {
    for (const Mix& mix : mixes) {
      for (int64_t Sq : {1, 37}) {
        const SdpaCase c = sdpa_case(2, 4, 2, Sq, 77, 48, 40);
        SCOPED_TRACE(std::string(name(backend)) + ", q " + attention_test::name(mix.q) + ", " +
                     describe(c) + ", " + seed_note(seed));
        SdpaTensors t(c, seed);
        MaskTensors masks(additive, c, seed);
        t.out.poison();
        std::vector<std::optional<HalfCopy>> copies(5);
        const auto in_type = [&](int i, const TensorView& view, DType dtype, TensorView* rounded) {
          if (dtype == f32) {
            *rounded = view;
            return view;
          }
          copies[i].emplace(view, dtype);
          *rounded = copies[i]->rounded();
          return copies[i]->view();
        };
        TensorView rq, rk, rv, rmask, unused;
        const TensorView q = in_type(0, t.q.view(), mix.q, &rq);
        const TensorView k = in_type(1, t.k.view(), mix.k, &rk);
        const TensorView v = in_type(2, t.v.view(), mix.v, &rv);
        attention::SdpaOptions options;
        options.backend = backend;
        options.mask = masks.options;
        options.mask.additive_mask =
            in_type(3, masks.options.additive_mask, mix.out == f32 ? f16 : mix.out, &rmask);
        const TensorView out = in_type(4, t.out.view(), mix.out, &unused);
        const attention::Status status =
            attention::scaled_dot_product_attention(q, k, v, out, options);
        ASSERT_TRUE(status.ok()) << status.message();
        if (copies[4]) copies[4]->write_back();
        attention::MaskOptions reference_mask = masks.options;
        reference_mask.additive_mask = rmask;
        std::vector<double> want;
        reference_sdpa(rq, rk, rv, c.effective_scale(), &want, nullptr, &reference_mask);
        if (mix.out == f32) {
          EXPECT_TRUE(matches_reference(t.out.to_dense(), want, t.out.shape()));
        } else {
          EXPECT_TRUE(matches_half_reference(t.out.to_dense(), want, t.out.shape(), mix.out));
        }
      }
    }
  }
}

// The plan names the half-KV decode kernels for decode calls over a half cache, and the fp32
// kernel a widened call runs otherwise.
TEST(HalfKvCache, KernelNamesFollowTheCacheType) {
  EXPECT_EQ(planned_kernel(1, 32, 1, 512, 128, false, DType::Float16), "sdpa_f16kv_decode");
  EXPECT_EQ(planned_kernel(8, 4, 1, 300, 128, true, DType::BFloat16), "sdpa_bf16kv_masked_decode");
  EXPECT_EQ(planned_kernel(1, 8, 2048, 2048, 64, false, DType::BFloat16),
            planned_kernel(1, 8, 2048, 2048, 64));
}

// Whether this CPU runs the native bf16 prefill: the CPUID bits of its target
// (x86-64-...-avx512_cannonlake-avx512_zen4: AVX-512 F/CD/BW/DQ/VL, IFMA, VBMI, VBMI2, VNNI,
// BITALG, BF16), read independently of the runtime's own check.
bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const unsigned ebx = (1u << 16) | (1u << 17) | (1u << 21) | (1u << 28) | (1u << 30) | (1u << 31);
  const unsigned ecx = (1u << 1) | (1u << 6) | (1u << 11) | (1u << 12);
  if ((b & ebx) != ebx || (c & ecx) != ecx) return false;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) != 0;
#else
  return false;
#endif
}

// Each case through the public API with bfloat16 q, k, v and out and the mask `causal`, against
// the naive loops of the kernel that ran (softmax weights rounded to bfloat16 where `native`): the
// half rule for out, the fp32 rule for logsumexp.
void check_bf16_prefill_cases(const std::vector<SdpaCase>& cases, bool native,
                              attention::Causal causal = attention::Causal::None) {
  const DType bf16 = DType::BFloat16;
  const uint64_t seed = seed_for_current_test();
  for (const SdpaCase& c : cases) {
    SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
    SdpaTensors t(c, seed);
    t.out.poison();
    t.lse.poison();
    HalfCopy q(t.q.view(), bf16), k(t.k.view(), bf16), v(t.v.view(), bf16), out(t.out.view(), bf16);
    attention::SdpaOptions options;
    options.scale = c.scale;
    options.mask.causal = causal;
    if (c.logsumexp) options.logsumexp = t.lse.view();
    const attention::Status status =
        attention::scaled_dot_product_attention(q.view(), k.view(), v.view(), out.view(), options);
    ASSERT_TRUE(status.ok()) << status.message();
    out.write_back();
    // The naive loops of the kernel that ran: softmax weights rounded to bfloat16 where native.
    std::vector<double> want_out, want_lse, naive_out;
    const attention::MaskOptions* mask = options.mask.empty() ? nullptr : &options.mask;
    reference_sdpa(q.rounded(), k.rounded(), v.rounded(), c.effective_scale(), &want_out,
                   c.logsumexp ? &want_lse : nullptr, mask);
    const DType weights = native_bf16_weights(q.view(), k.view(), v.view(), bf16, options.mask);
    EXPECT_EQ(weights, native ? bf16 : DType::Float32);
    reference_sdpa(q.rounded(), k.rounded(), v.rounded(), c.effective_scale(), &naive_out, nullptr,
                   mask, weights);
    EXPECT_TRUE(
        matches_half_reference(t.out.to_dense(), want_out, t.out.shape(), bf16, &naive_out));
    EXPECT_TRUE(t.out.outside_view_holds(std::numeric_limits<float>::quiet_NaN()));
    if (c.logsumexp) {
      EXPECT_TRUE(matches_reference(t.lse.to_dense(), want_lse, t.lse.shape(), Domain::Log));
      EXPECT_TRUE(t.lse.outside_view_holds(std::numeric_limits<float>::quiet_NaN()));
    }
  }
}

// Unmasked prefill with bfloat16 q, k, v and out: the native kernel (vdpbf16ps) on a CPU with
// AVX-512 BF16, the widening path elsewhere. The native kernel rounds the softmax weights to
// bfloat16 before P·V (FlashAttention's P), so it is held to the half rule on its own: key counts
// off whole blocks and below one, GQA, D = 2 and 128, Dv off whole vectors, padded and
// interleaved layouts, logsumexp (fp32, the fp32 rule).
TEST(Bf16Prefill, NativeKernelMatchesReference) {
  const bool native = cpu_has_avx512_bf16();
  const DType bf16 = DType::BFloat16;
  EXPECT_EQ(is_native_bf16_prefill(planned_kernel(1, 8, 300, 500, 64, false, bf16, bf16)), native);
  // Masks, odd D, decode shapes and other dtypes never take it.
  EXPECT_FALSE(is_native_bf16_prefill(planned_kernel(1, 8, 300, 500, 64, true, bf16, bf16)));
  EXPECT_FALSE(is_native_bf16_prefill(planned_kernel(1, 8, 300, 500, 63, false, bf16, bf16)));
  EXPECT_FALSE(is_native_bf16_prefill(planned_kernel(1, 8, 2, 500, 64, false, bf16, bf16)));
  EXPECT_FALSE(
      is_native_bf16_prefill(planned_kernel(1, 8, 300, 500, 64, false, bf16, DType::Float32)));
  if (!native) std::cout << "[ NOTE ] no AVX-512 BF16 here: the widening path ran instead\n";
  check_bf16_prefill_cases(
      {
          sdpa_case(1, 4, 4, 300, 500, 64, 64).with_logsumexp(),
          sdpa_case(2, 4, 2, 37, 77, 2, 40).with_logsumexp(),
          sdpa_case(1, 2, 1, 130, 1000, 128, 24).layout(Layout::kPadded),
          sdpa_case(1, 3, 3, 9, 5, 16, 8).with_logsumexp(),
          sdpa_case(2, 2, 2, 65, 129, 32, 17)
              .layouts(Layout::kBSHD, Layout::kSHBD, Layout::kDense, Layout::kPadded),
      },
      native);
}

// Whether this CPU has AMX-TILE and AMX-BF16 (CPUID leaf 7, edx bits 24 and 22), read apart
// from the runtime's check (which also asks Linux for the tile state, and reads
// ATTENTION_CPU_AMX).
bool cpu_has_amx_bf16() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (d & (1u << 22)) != 0 && (d & (1u << 24)) != 0;
#else
  return false;
#endif
}

// The AMX kernel (sdpa_bf16_amx_prefill) where the CPU has AMX, the vdpbf16ps kernel for the
// shapes its tiles do not take (Sq < 32, D off 32, Dv off 16 or under 32, Sk > 8192). Its own
// cases: 32-row work items with the last one shifted inwards (Sq 32, 33, 97, 131), one key and keys
// off whole 32-key blocks, GQA and MQA, D 32/64/128 with Dv 32 to 128 (48: the last pair of
// 16-value tiles shifted inwards), strided and interleaved layouts.
TEST(Bf16Prefill, AmxKernelMatchesReference) {
  const char* env = std::getenv("ATTENTION_CPU_AMX");
  const bool amx = cpu_has_amx_bf16() && !(env != nullptr && std::string(env) == "0");
  const DType bf16 = DType::BFloat16;
  const auto kernel = [&](int64_t Sq, int64_t Sk, int64_t D) {
    return planned_kernel(1, 8, Sq, Sk, D, false, bf16, bf16);
  };
  EXPECT_EQ(kernel(300, 500, 64) == "sdpa_bf16_amx_prefill", amx);
  EXPECT_EQ(kernel(32, 1, 128) == "sdpa_bf16_amx_prefill", amx);
  EXPECT_EQ(kernel(32, 8192, 32) == "sdpa_bf16_amx_prefill", amx);
  for (const auto& [Sq, Sk, D] :
       {std::array<int64_t, 3>{31, 500, 64}, {300, 500, 48}, {300, 8193, 64}, {300, 500, 2}}) {
    EXPECT_NE(kernel(Sq, Sk, D), "sdpa_bf16_amx_prefill") << Sq << " " << Sk << " " << D;
  }
  if (!amx) {
    GTEST_SKIP() << "no AMX-BF16 on this CPU (or ATTENTION_CPU_AMX=0): the vdpbf16ps kernel or "
                    "the widening path serves these calls";
  }
  check_bf16_prefill_cases(
      {
          sdpa_case(1, 2, 2, 32, 1, 64, 64).with_logsumexp(),
          sdpa_case(1, 3, 3, 33, 31, 128, 128).with_logsumexp(),
          sdpa_case(2, 4, 2, 97, 77, 64, 48).with_logsumexp(),
          sdpa_case(1, 4, 1, 131, 523, 32, 32).layout(Layout::kPadded),
          sdpa_case(2, 2, 2, 64, 129, 64, 64)
              .layouts(Layout::kBSHD, Layout::kSHBD, Layout::kDense, Layout::kPadded)
              .with_logsumexp(),
          sdpa_case(1, 1, 1, 40, 1000, 128, 112),
          // 2.1 MiB of packed K and V per kv head: on two threads, groups of one head.
          sdpa_case(2, 2, 1, 70, 4100, 128, 128).with_logsumexp(),
      },
      /*native=*/true);
  // Causal masks, in calls of 64 rows over the keys each call sees, the last call of a head
  // taking the rest (Sq 159: 64 + 95 rows; 300: 3 x 64 + 108), bottom-right with Sq < Sk and
  // Sq == Sk, GQA.
  for (const attention::Causal causal :
       {attention::Causal::TopLeft, attention::Causal::BottomRight}) {
    SCOPED_TRACE(causal == attention::Causal::TopLeft ? "top-left" : "bottom-right");
    check_bf16_prefill_cases(
        {
            sdpa_case(1, 2, 2, 32, 32, 64, 64).with_logsumexp(),
            sdpa_case(1, 4, 2, 159, 300, 64, 64).with_logsumexp(),
            sdpa_case(2, 2, 1, 161, 161, 128, 48).layout(Layout::kPadded),
            sdpa_case(1, 2, 2, 300, 517, 32, 32).with_logsumexp(),
        },
        /*native=*/true, causal);
  }
}

// A causal bf16 prefill whose hidden keys hold inf or NaN values: the rows that do not see them
// come out exactly as without them (a kernel that multiplies hidden values by a weight of 0, as
// the AMX tiles do, would make them NaN; the runtime then takes another kernel), the row that
// sees them does not come out finite. In head 0 one key is NaN: the rows that see it must come
// out NaN (a softmax computed with fast math may drop one NaN score), the rows before it 1.0.
// 1x2x64x64x64, values 1.0.
TEST(Bf16Prefill, HiddenNonFiniteValuesStayHidden) {
  const int64_t H = 2, S = 64, D = 64;
  std::mt19937 rng(static_cast<unsigned>(seed_for_current_test()));
  std::uniform_int_distribution<int> small(-64, 64);
  std::vector<uint16_t> q(H * S * D), k(H * S * D), v(H * S * D, 0x3f80), out(H * S * D, 0x7fc0);
  for (auto& x : q) x = to_half_bits(small(rng) / 64.0f, DType::BFloat16);
  for (auto& x : k) x = to_half_bits(small(rng) / 64.0f, DType::BFloat16);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t c = 0; c < D; ++c) v[(h * S + S - 1) * D + c] = h == 0 ? 0x7f80 : 0x7fc0;
  }
  constexpr int64_t kNanKey = 5;
  k[kNanKey * D + 7] = 0x7fc0;  // head 0
  const auto view = [](std::vector<uint16_t>& data) {
    return TensorView::contiguous(data.data(), DType::BFloat16, {1, 2, 64, 64});
  };
  attention::SdpaOptions options;
  options.mask.causal = attention::Causal::TopLeft;
  ASSERT_TRUE(
      attention::scaled_dot_product_attention(view(q), view(k), view(v), view(out), options).ok());
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < S; ++i) {
      for (int64_t c = 0; c < D; ++c) {
        const uint16_t got = out[(h * S + i) * D + c];
        if (h == 0 && i >= kNanKey) {
          ASSERT_FALSE(std::isfinite(from_half_bits(got, DType::BFloat16))) << i << " " << c;
        } else if (i < S - 1) {
          ASSERT_EQ(got, 0x3f80) << "head " << h << " row " << i << " col " << c;
        } else {
          ASSERT_FALSE(std::isfinite(from_half_bits(got, DType::BFloat16))) << h << " " << c;
        }
      }
    }
  }
}

// A NaN score on the AMX kernel (the kernel keeps it through its exp2's clamp, no is_nan test):
// one NaN feature of key 5 in head 0 makes the rows that see that key NaN, unmasked (every row)
// and causal (rows 5 on); the other rows and head 1 stay finite. 1x2x64x64x64, values finite.
TEST(Bf16Prefill, AmxNanScoresComeOutNaN) {
  const int64_t H = 2, S = 64, D = 64;
  const char* env = std::getenv("ATTENTION_CPU_AMX");
  const bool amx = cpu_has_amx_bf16() && !(env != nullptr && std::string(env) == "0");
  EXPECT_EQ(planned_kernel(1, H, S, S, D, false, DType::BFloat16, DType::BFloat16) ==
                "sdpa_bf16_amx_prefill",
            amx);
  std::mt19937 rng(static_cast<unsigned>(seed_for_current_test()));
  std::uniform_int_distribution<int> small(-64, 64);
  std::vector<uint16_t> q(H * S * D), k(H * S * D), v(H * S * D);
  for (auto* t : {&q, &k, &v}) {
    for (auto& x : *t) x = to_half_bits(small(rng) / 64.0f, DType::BFloat16);
  }
  constexpr int64_t kNanKey = 5;
  k[kNanKey * D + 7] = 0x7fc0;  // head 0
  const auto view = [](std::vector<uint16_t>& data) {
    return TensorView::contiguous(data.data(), DType::BFloat16, {1, 2, 64, 64});
  };
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "unmasked");
    std::vector<uint16_t> out(H * S * D, 0x7fc0);
    attention::SdpaOptions options;
    if (causal) options.mask.causal = attention::Causal::TopLeft;
    ASSERT_TRUE(
        attention::scaled_dot_product_attention(view(q), view(k), view(v), view(out), options)
            .ok());
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < S; ++i) {
        const bool sees_nan = h == 0 && (!causal || i >= kNanKey);
        for (int64_t c = 0; c < D; ++c) {
          const float got = from_half_bits(out[(h * S + i) * D + c], DType::BFloat16);
          ASSERT_EQ(std::isnan(got), sees_nan) << "head " << h << " row " << i << " col " << c;
        }
      }
    }
  }
}

// Values beyond Float16's range give ±inf in a Float16 output (the fp32 result is finite);
// BFloat16 holds them.
TEST(HalfKvCache, OutputsBeyondFloat16RangeBecomeInfinite) {
  const SdpaCase c = sdpa_case(1, 1, 1, 2, 8, 4, 3);
  SdpaTensors t(c, seed_for_current_test());
  t.v.fill([](const Index& i) { return i[3] == 0 ? 1e5f : i[3] == 1 ? -1e6f : 3.0f; });
  for (DType dtype : kHalfTypes) {
    HalfCopy out(t.out.view(), dtype);
    ASSERT_TRUE(
        attention::scaled_dot_product_attention(t.q.view(), t.k.view(), t.v.view(), out.view())
            .ok());
    out.write_back();
    const std::vector<float> got = t.out.to_dense();
    const float inf = std::numeric_limits<float>::infinity();
    for (int64_t row = 0; row < 2; ++row) {
      EXPECT_EQ(got[row * 3 + 0], dtype == DType::Float16 ? inf : round_to(dtype, 1e5f));
      EXPECT_EQ(got[row * 3 + 1], dtype == DType::Float16 ? -inf : round_to(dtype, -1e6f));
      EXPECT_EQ(got[row * 3 + 2], 3.0f);
    }
  }
}

// Errors: an operand of a non-float type is named and out is left as it was; half tensors on a
// CUDA device are refused before anything runs.
TEST(HalfKvCache, ErrorsNameTheArgument) {
  const SdpaCase c = sdpa_case(1, 2, 2, 3, 5, 8, 8);
  SdpaTensors t(c, 1);
  std::vector<int32_t> ints(64);
  TensorView q_int = TensorView::contiguous(ints.data(), DType::Int32, {1, 2, 3, 8});
  t.out.poison();
  attention::Status status =
      attention::scaled_dot_product_attention(q_int, t.k.view(), t.v.view(), t.out.view());
  EXPECT_EQ(status.code(), attention::StatusCode::InvalidArgument);
  EXPECT_EQ(status.message(), "q: expected dtype Float32, Float16 or BFloat16, got Int32");
  EXPECT_TRUE(t.out.outside_view_holds(std::numeric_limits<float>::quiet_NaN()));
  for (float x : t.out.to_dense()) EXPECT_TRUE(std::isnan(x));

  // convert_dtype: tensors on two devices, and a stream for a CPU conversion.
  HalfCopy k(t.k.view(), DType::Float16);
  TensorView k_cuda = k.view();
  k_cuda.device = attention::Device::CUDA;
  status = attention::convert_dtype(t.q.view(), k_cuda);
  EXPECT_EQ(status.code(), attention::StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("every tensor of a call must be on the same device"),
            std::string::npos)
      << status.message();
  int stream = 0;
  attention::DeviceOptions options;
  options.gpu.cuda_stream = &stream;
  status = attention::convert_dtype(t.k.view(), k.view(), options);
  EXPECT_EQ(status.code(), attention::StatusCode::InvalidArgument);
  EXPECT_EQ(status.message(),
            "device.gpu.cuda_stream: set, but the call runs on the CPU backend (a CUDA stream "
            "orders Backend::CUDA calls only)");
}

}  // namespace
}  // namespace attention_test
