// Kernels fused with the example mods (examples/mods/attention_mods.cpp) against the naive
// reference applying the same mods in double: the score mod as the pair score, the mask mod as a
// dense boolean mask. Also: the built-in causal mask, window, ALiBi and softcap re-expressed as
// mods match the built-in kernels, Float16 / BFloat16 tensors go through the same kernels, and
// every bad argument is refused without writing out.
#include "attention/mod_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "mod_alibi_softcap_prefill.h"
#include "mod_causal_decode.h"
#include "mod_causal_prefill.h"
#include "mod_causal_ranges.h"
#include "mod_document_mask_prefill.h"
#include "mod_document_mask_ranges.h"
#include "mod_prefix_lm_prefill.h"
#include "mod_prefix_lm_ranges.h"
#include "mod_sliding_window_prefill.h"
#include "mod_sliding_window_ranges.h"
#include "mod_t5_bias_prefill.h"
#include "mod_tree_mask_prefill.h"
#include "mod_tree_mask_ranges.h"
#if ATTENTION_TEST_GPU_MODS
#include "mod_alibi_softcap_prefill_cuda.h"
#include "mod_alibi_softcap_prefill_opencl.h"
#include "mod_causal_prefill_cuda.h"
#include "mod_causal_prefill_opencl.h"
#include "mod_causal_ranges_cuda.h"
#include "mod_causal_ranges_opencl.h"
#include "mod_document_mask_prefill_cuda.h"
#include "mod_document_mask_prefill_opencl.h"
#include "mod_document_mask_ranges_cuda.h"
#include "mod_document_mask_ranges_opencl.h"
#include "mod_prefix_lm_prefill_cuda.h"
#include "mod_prefix_lm_prefill_opencl.h"
#include "mod_prefix_lm_ranges_cuda.h"
#include "mod_prefix_lm_ranges_opencl.h"
#include "mod_sliding_window_prefill_cuda.h"
#include "mod_sliding_window_prefill_opencl.h"
#include "mod_sliding_window_ranges_cuda.h"
#include "mod_sliding_window_ranges_opencl.h"
#include "mod_t5_bias_prefill_cuda.h"
#include "mod_t5_bias_prefill_opencl.h"
#include "mod_tree_mask_prefill_cuda.h"
#include "mod_tree_mask_prefill_opencl.h"
#include "mod_tree_mask_ranges_cuda.h"
#include "mod_tree_mask_ranges_opencl.h"
#endif
#include "kernel_contract.h"
#include "reference/half_reference.h"
#include "reference/sdpa_reference.h"
#include "test_util.h"

namespace attention_test {
namespace {

using attention::ModArgument;
using attention::ModKernels;
using attention::StatusCode;
using attention::TensorView;

ModKernels prefill_only(const char* mod, attention::ModKernel prefill,
                        attention::ModKernel key_ranges = {}) {
  ModKernels k;
  k.mod = mod;
  k.prefill = prefill;
  k.key_ranges = key_ranges;
  return k;
}

// A mod's kernels for each backend; () picks the suite's (ATTENTION_TEST_BACKEND). The CPU's
// are AVX2 test variants; a GPU target builds prefill and key ranges, its prefill kernel serving
// decode calls too.
struct ModSet {
  ModKernels cpu, opencl, cuda;
  const ModKernels& operator()() const {
    switch (test_backend()) {
      case attention::Backend::OpenCL:
        return opencl;
      case attention::Backend::CUDA:
        return cuda;
      default:
        return cpu;
    }
  }
};

#if ATTENTION_TEST_GPU_MODS
#define GPU_MOD_KERNELS(mod)                                              \
  , prefill_only(#mod, ATTENTION_MOD_KERNEL(mod_##mod##_prefill_opencl)), \
      prefill_only(#mod, ATTENTION_MOD_KERNEL(mod_##mod##_prefill_cuda))
#define GPU_MOD_KERNELS_WITH_RANGES(mod)                                   \
  ,                                                                        \
      prefill_only(#mod, ATTENTION_MOD_KERNEL(mod_##mod##_prefill_opencl), \
                   ATTENTION_MOD_KERNEL(mod_##mod##_ranges_opencl)),       \
      prefill_only(#mod, ATTENTION_MOD_KERNEL(mod_##mod##_prefill_cuda),   \
                   ATTENTION_MOD_KERNEL(mod_##mod##_ranges_cuda))
#else
// No GPU kernels in this build (sanitizer and cross builds): the GPU sets stay empty.
#define GPU_MOD_KERNELS(mod) , ModKernels{}, ModKernels{}
#define GPU_MOD_KERNELS_WITH_RANGES(mod) GPU_MOD_KERNELS(mod)
#endif

const ModSet kCausal{{"causal", ATTENTION_MOD_KERNEL(mod_causal_prefill),
                      ATTENTION_MOD_KERNEL(mod_causal_decode),
                      ATTENTION_MOD_KERNEL(mod_causal_ranges)} GPU_MOD_KERNELS_WITH_RANGES(causal)};
const ModSet kWindow{prefill_only(
    "sliding_window", ATTENTION_MOD_KERNEL(mod_sliding_window_prefill),
    ATTENTION_MOD_KERNEL(mod_sliding_window_ranges)) GPU_MOD_KERNELS_WITH_RANGES(sliding_window)};
const ModSet kAlibiSoftcap{
    prefill_only("alibi_softcap", ATTENTION_MOD_KERNEL(mod_alibi_softcap_prefill))
        GPU_MOD_KERNELS(alibi_softcap)};
const ModSet kDocuments{prefill_only(
    "document_mask", ATTENTION_MOD_KERNEL(mod_document_mask_prefill),
    ATTENTION_MOD_KERNEL(mod_document_mask_ranges)) GPU_MOD_KERNELS_WITH_RANGES(document_mask)};
const ModSet kT5{prefill_only("t5_bias", ATTENTION_MOD_KERNEL(mod_t5_bias_prefill))
                     GPU_MOD_KERNELS(t5_bias)};
const ModSet kPrefixLm{prefill_only("prefix_lm", ATTENTION_MOD_KERNEL(mod_prefix_lm_prefill),
                                    ATTENTION_MOD_KERNEL(mod_prefix_lm_ranges))
                           GPU_MOD_KERNELS_WITH_RANGES(prefix_lm)};
const ModSet kTree{prefill_only("tree_mask", ATTENTION_MOD_KERNEL(mod_tree_mask_prefill),
                                ATTENTION_MOD_KERNEL(mod_tree_mask_ranges))
                       GPU_MOD_KERNELS_WITH_RANGES(tree_mask)};

struct Shape {
  int64_t B, H, Hkv, Sq, Sk, D, Dv;
};

// A mod as the naive loops apply it, in double: the logit of a scaled score, and visibility.
struct ModReference {
  std::function<double(double score, int64_t b, int64_t h, int64_t i, int64_t j)> score_mod;
  std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)> mask_mod;
};

// One call's tensors with fresh random values; out and logsumexp poisoned.
struct Call {
  explicit Call(const Shape& s, std::mt19937_64& rng)
      : shape(s),
        q({s.B, s.H, s.Sq, s.D}),
        k({s.B, s.Hkv, s.Sk, s.D}),
        v({s.B, s.Hkv, s.Sk, s.Dv}),
        out({s.B, s.H, s.Sq, s.Dv}),
        lse({s.B, s.H, s.Sq}) {
    q.fill_uniform(rng, -1.0f, 1.0f);
    k.fill_uniform(rng, -1.0f, 1.0f);
    v.fill_values(rng);
    out.poison();
    lse.poison();
  }
  attention::Status run(const ModKernels& kernels, const std::vector<ModArgument>& arguments) {
    attention::SdpaOptions options;
    options.scale = scale;
    options.logsumexp = lse.view();
    options.backend = test_backend();
    return attention::mod_attention(kernels, q.view(), k.view(), v.view(), out.view(), arguments,
                                    options);
  }
  // Checks out and logsumexp against the reference with `mod` (out rounded to `out_dtype` by the
  // call: the half-precision accuracy rule).
  void expect_matches(const ModReference& mod,
                      attention::DType out_dtype = attention::DType::Float32) {
    const Shape& s = shape;
    const TensorView qv = q.view(), kv = k.view();
    const auto at = [](const TensorView& t, int64_t a, int64_t b, int64_t c, int64_t d) {
      return static_cast<double>(static_cast<const float*>(
          t.data)[a * t.strides[0] + b * t.strides[1] + c * t.strides[2] + d * t.strides[3]]);
    };
    const int64_t group = s.H / s.Hkv;
    const ::PairScore score = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
      double dot = 0;
      for (int64_t d = 0; d < s.D; ++d) dot += at(qv, b, h, i, d) * at(kv, b, h / group, j, d);
      const double scaled = scale * dot;
      return mod.score_mod ? mod.score_mod(scaled, b, h, i, j) : scaled;
    };
    attention::MaskOptions mask;
    std::vector<uint8_t> allowed;
    if (mod.mask_mod) {
      allowed.resize(static_cast<size_t>(s.B * s.H * s.Sq * s.Sk));
      size_t n = 0;
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.H; ++h)
          for (int64_t i = 0; i < s.Sq; ++i)
            for (int64_t j = 0; j < s.Sk; ++j) allowed[n++] = mod.mask_mod(b, h, i, j) ? 1 : 0;
      mask.bool_mask =
          TensorView::contiguous(allowed.data(), attention::DType::Bool, {s.B, s.H, s.Sq, s.Sk});
    }
    std::vector<double> expected_out, expected_lse;
    reference_attention(score, s.H, s.Sq, v.view(), &expected_out, &expected_lse, &mask);
    if (out_dtype == attention::DType::Float32) {
      EXPECT_TRUE(matches_reference(out.to_dense(), expected_out, out.shape()));
    } else {
      EXPECT_TRUE(matches_half_reference(out.to_dense(), expected_out, out.shape(), out_dtype));
    }
    EXPECT_TRUE(matches_reference(lse.to_dense(), expected_lse, lse.shape(), Domain::Log));
  }

  Shape shape;
  float scale = 0.3f;
  Tensor q, k, v, out, lse;
};

// Every element still the NaN poison: nothing was written.
bool untouched(const Tensor& t) {
  for (float x : t.storage()) {
    if (!std::isnan(x)) return false;
  }
  return true;
}

class ModAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (skip_unless_backend_available()) return;
    seed_ = seed_for_current_test();
    rng_.seed(seed_);
  }
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

int64_t diagonal(int64_t i, const Shape& s) { return i + s.Sk - s.Sq; }

TEST_F(ModAttention, CausalPrefillAndDecodeMatchReference) {
  SCOPED_TRACE(seed_note(seed_));
  for (const Shape& s : {Shape{2, 4, 2, 67, 67, 32, 24}, Shape{1, 2, 1, 50, 131, 64, 64},
                         Shape{2, 8, 2, 1, 300, 64, 64}, Shape{1, 2, 2, 2, 77, 16, 16}}) {
    SCOPED_TRACE("Sq " + std::to_string(s.Sq) + " Sk " + std::to_string(s.Sk));
    Call call(s, rng_);
    ASSERT_TRUE(call.run(kCausal(), {}).ok());
    call.expect_matches(
        {{}, [&](int64_t, int64_t, int64_t i, int64_t j) { return j <= diagonal(i, s); }});
  }
}

TEST_F(ModAttention, SlidingWindowMatchesReference) {
  SCOPED_TRACE(seed_note(seed_));
  const Shape s{2, 2, 2, 90, 100, 32, 32};
  for (int window : {0, 17, 200}) {
    Call call(s, rng_);
    ASSERT_TRUE(call.run(kWindow(), {ModArgument::of_scalar("window", window)}).ok());
    call.expect_matches({{}, [&](int64_t, int64_t, int64_t i, int64_t j) {
                           return j <= diagonal(i, s) && j >= diagonal(i, s) - window;
                         }});
  }
}

TEST_F(ModAttention, AlibiSoftcapMatchesReference) {
  SCOPED_TRACE(seed_note(seed_));
  const Shape s{1, 4, 2, 70, 90, 32, 16};
  Call call(s, rng_);
  call.scale = 4.0f;  // scores up to ~40: the cap bites
  std::vector<float> slopes(s.H);
  std::uniform_real_distribution<float> slope(0.0f, 0.5f);
  for (float& x : slopes) x = slope(rng_);
  const float cap = 5.0f;
  ASSERT_TRUE(
      call.run(kAlibiSoftcap(),
               {ModArgument::of_tensor("slopes", TensorView::contiguous(slopes.data(), {s.H})),
                ModArgument::of_scalar("softcap", cap)})
          .ok());
  call.expect_matches({[&](double score, int64_t, int64_t h, int64_t i, int64_t j) {
                         return cap * std::tanh(score / cap) -
                                slopes[h] * std::abs(static_cast<double>(j - diagonal(i, s)));
                       },
                       {}});
}

TEST_F(ModAttention, DocumentMaskMatchesReference) {
  SCOPED_TRACE(seed_note(seed_));
  const Shape s{2, 2, 1, 200, 200, 64, 64};
  Call call(s, rng_);
  std::vector<int32_t> ids = random_document_ids(s.B, s.Sk, 60, rng_);
  const TensorView ids_view =
      TensorView::contiguous(ids.data(), attention::DType::Int32, {s.B, s.Sk});
  ASSERT_TRUE(call.run(kDocuments(), {ModArgument::of_tensor("document_ids", ids_view)}).ok());
  call.expect_matches({{}, [&](int64_t b, int64_t, int64_t i, int64_t j) {
                         return ids[b * s.Sk + i] == ids[b * s.Sk + j];
                       }});
}

// T5's bucket of relative position kv - q (bidirectional, 32 buckets, max_distance 128), as in
// the T5 code, in double.
int t5_bucket(int64_t relative) {
  int bucket = relative > 0 ? 16 : 0;
  const int64_t n = std::abs(relative);
  if (n < 8) return bucket + static_cast<int>(n);
  const int large = 8 + static_cast<int>(std::log(n / 8.0) / std::log(128.0 / 8.0) * 8.0 + 1e-9);
  return bucket + std::min(large, 15);
}

TEST_F(ModAttention, T5BiasMatchesReference) {
  SCOPED_TRACE(seed_note(seed_));
  const Shape s{1, 3, 3, 150, 300, 32, 32};  // distances up to 299: every bucket
  Call call(s, rng_);
  std::vector<float> bias(s.H * 32);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (float& x : bias) x = value(rng_);
  ASSERT_TRUE(call.run(kT5(), {ModArgument::of_tensor(
                                  "bias", TensorView::contiguous(bias.data(), {s.H, 32}))})
                  .ok());
  call.expect_matches({[&](double score, int64_t, int64_t h, int64_t i, int64_t j) {
                         return score + bias[h * 32 + t5_bucket(j - i)];
                       },
                       {}});
}

TEST_F(ModAttention, PrefixLmMatchesReference) {
  SCOPED_TRACE(seed_note(seed_));
  const Shape s{3, 2, 1, 80, 80, 32, 32};
  Call call(s, rng_);
  std::vector<int32_t> prefix = {0, 37, 80};
  ASSERT_TRUE(call.run(kPrefixLm(),
                       {ModArgument::of_tensor(
                           "prefix_lengths",
                           TensorView::contiguous(prefix.data(), attention::DType::Int32, {s.B}))})
                  .ok());
  call.expect_matches(
      {{}, [&](int64_t b, int64_t, int64_t i, int64_t j) { return j < prefix[b] || j <= i; }});
}

TEST_F(ModAttention, TreeMaskMatchesReference) {
  SCOPED_TRACE(seed_note(seed_));
  const Shape s{2, 4, 2, 7, 57, 64, 64};  // 7 drafts after 50 cached keys
  Call call(s, rng_);
  // A random tree per batch: draft t's parent is an earlier draft or the cache (-1).
  std::vector<int32_t> ancestors(s.B * s.Sq);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t t = 0; t < s.Sq; ++t) {
      const int parent = std::uniform_int_distribution<int>(-1, static_cast<int>(t) - 1)(rng_);
      ancestors[b * s.Sq + t] = (1 << t) | (parent >= 0 ? ancestors[b * s.Sq + parent] : 0);
    }
  }
  ASSERT_TRUE(call.run(kTree(), {ModArgument::of_tensor(
                                    "tree_ancestors",
                                    TensorView::contiguous(ancestors.data(),
                                                           attention::DType::Int32, {s.B, s.Sq}))})
                  .ok());
  const int64_t cached = s.Sk - s.Sq;
  call.expect_matches({{}, [&](int64_t b, int64_t, int64_t i, int64_t j) {
                         return j < cached || ((ancestors[b * s.Sq + i] >> (j - cached)) & 1);
                       }});
}

// The built-in masks re-expressed as mods give the built-in kernels' results (different
// kernels, ISA variants and key ranges: equal within fp32 rounding, not bit for bit).
TEST_F(ModAttention, BuiltinMasksAsModsMatchBuiltinKernels) {
  SCOPED_TRACE(seed_note(seed_));
  const Shape s{2, 4, 2, 100, 130, 64, 64};
  std::vector<float> slopes(s.H);
  for (int64_t h = 0; h < s.H; ++h) slopes[h] = 0.05f * static_cast<float>(h + 1);
  struct Case {
    const char* name;
    const ModKernels* kernels;
    std::vector<ModArgument> arguments;
    attention::MaskOptions mask;
  };
  std::vector<Case> cases(3);
  cases[0] = {"causal", &kCausal(), {}, {}};
  cases[0].mask.causal = attention::Causal::BottomRight;
  cases[1] = {"window", &kWindow(), {ModArgument::of_scalar("window", 20)}, {}};
  cases[1].mask.causal = attention::Causal::BottomRight;
  cases[1].mask.window = 20;
  cases[2] = {"alibi_softcap",
              &kAlibiSoftcap(),
              {ModArgument::of_tensor("slopes", TensorView::contiguous(slopes.data(), {s.H})),
               ModArgument::of_scalar("softcap", 3.0f)},
              {}};
  cases[2].mask.alibi = true;
  cases[2].mask.alibi_slopes = TensorView::contiguous(slopes.data(), {s.H});
  cases[2].mask.softcap = 3.0f;
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    Call call(s, rng_);
    ASSERT_TRUE(call.run(*c.kernels, c.arguments).ok());
    Tensor builtin({s.B, s.H, s.Sq, s.Dv});
    builtin.poison();
    attention::SdpaOptions options;
    options.scale = call.scale;
    options.mask = c.mask;
    options.backend = test_backend();
    ASSERT_TRUE(attention::scaled_dot_product_attention(call.q.view(), call.k.view(), call.v.view(),
                                                        builtin.view(), options)
                    .ok());
    const std::vector<float> a = call.out.to_dense(), b = builtin.to_dense();
    float worst = 0;
    for (size_t n = 0; n < a.size(); ++n) worst = std::max(worst, std::abs(a[n] - b[n]));
    EXPECT_LE(worst, 2e-6f);
  }
}

// Float16 and BFloat16 tensors, alone and mixed with fp32 (a half KV cache beside fp32 queries),
// prefill and decode: widened into the fp32 kernels, out rounded once, against the reference on
// the rounded inputs.
TEST_F(ModAttention, HalfPrecisionTensorsMatchReference) {
  SCOPED_TRACE(seed_note(seed_));
  using attention::DType;
  struct Mix {
    DType q_out, kv;
  };
  const auto name = [](DType d) {
    return d == DType::Float32 ? "Float32" : d == DType::Float16 ? "Float16" : "BFloat16";
  };
  for (const Mix& mix :
       {Mix{DType::Float16, DType::Float16}, Mix{DType::BFloat16, DType::BFloat16},
        Mix{DType::Float32, DType::Float16}, Mix{DType::BFloat16, DType::Float32}}) {
    for (const Shape& s : {Shape{2, 4, 2, 67, 90, 32, 24}, Shape{1, 4, 1, 1, 200, 64, 64}}) {
      SCOPED_TRACE(std::string("q/out ") + name(mix.q_out) + ", k/v " + name(mix.kv) + ", Sq " +
                   std::to_string(s.Sq));
      Call call(s, rng_);
      // Half copies hold exactly the rounded values, which the reference reads from the fp32
      // tensors.
      std::vector<std::unique_ptr<HalfCopy>> copies;
      const auto as = [&](Tensor& t, DType dtype) {
        if (dtype == DType::Float32) return t.view();
        for (float& x : t.storage()) x = std::isnan(x) ? x : round_to(dtype, x);
        copies.push_back(std::make_unique<HalfCopy>(t.view(), dtype));
        return copies.back()->view();
      };
      const TensorView q = as(call.q, mix.q_out), k = as(call.k, mix.kv), v = as(call.v, mix.kv);
      const TensorView out = as(call.out, mix.q_out);
      attention::SdpaOptions options;
      options.scale = call.scale;
      options.logsumexp = call.lse.view();
      options.backend = test_backend();
      const attention::Status status =
          attention::mod_attention(kCausal(), q, k, v, out, {}, options);
      ASSERT_TRUE(status.ok()) << status.message();
      if (mix.q_out != DType::Float32) copies.back()->write_back();
      call.expect_matches(
          {{}, [&](int64_t, int64_t, int64_t i, int64_t j) { return j <= diagonal(i, s); }},
          mix.q_out);
    }
  }
}

TEST_F(ModAttention, BadArgumentsAreRefusedWithoutWriting) {
  const Shape s{2, 2, 1, 40, 40, 16, 16};
  std::vector<int32_t> ids(s.B * s.Sk, 0), short_ids(s.B * (s.Sk - 1), 0),
      long_ids(s.B * (s.Sk + 1), 0);
  std::vector<float> float_ids(s.B * s.Sk, 0.0f);
  const auto ids_view = [&](std::vector<int32_t>& data, int64_t keys) {
    return TensorView::contiguous(data.data(), attention::DType::Int32, {s.B, keys});
  };
  struct Case {
    std::vector<ModArgument> arguments;
    StatusCode code;
    std::string names;  // what the message must name
  };
  const std::vector<Case> cases = {
      {{}, StatusCode::InvalidArgument, "document_ids"},
      {{ModArgument::of_tensor("document_ids", ids_view(ids, s.Sk)),
        ModArgument::of_scalar("window", 3)},
       StatusCode::InvalidArgument,
       "window"},
      {{ModArgument::of_scalar("document_ids", 1)}, StatusCode::InvalidArgument, "document_ids"},
      {{ModArgument::of_tensor("document_ids",
                               TensorView::contiguous(float_ids.data(), {s.B, s.Sk}))},
       StatusCode::InvalidArgument,
       "Float32"},
      {{ModArgument::of_tensor(
           "document_ids",
           TensorView::contiguous(ids.data(), attention::DType::Int32, {s.B * s.Sk}))},
       StatusCode::InvalidArgument,
       "document_ids"},
      // The declared shape [B, Sk], checked by the kernel before it computes: shorter, longer.
      {{ModArgument::of_tensor("document_ids", ids_view(short_ids, s.Sk - 1))},
       StatusCode::InvalidArgument,
       "arguments[\"document_ids\"]: shape [2, 39]"},
      {{ModArgument::of_tensor("document_ids", ids_view(long_ids, s.Sk + 1))},
       StatusCode::InvalidArgument,
       "document_ids: expected shape [B, Sk]"},
  };
  std::mt19937_64 rng(1);
  for (const Case& c : cases) {
    Call call(s, rng);
    const attention::Status status = call.run(kDocuments(), c.arguments);
    EXPECT_EQ(status.code(), c.code) << status.message();
    EXPECT_NE(status.message().find(c.names), std::string::npos) << status.message();
    EXPECT_TRUE(untouched(call.out));
  }
  // A non-integer Int32 scalar; masks in options; a missing prefill kernel.
  Call call(s, rng);
  EXPECT_EQ(call.run(kWindow(), {ModArgument::of_scalar("window", 2.5)}).code(),
            StatusCode::InvalidArgument);
  attention::SdpaOptions options;
  options.mask.causal = attention::Causal::TopLeft;
  EXPECT_EQ(attention::mod_attention(kCausal(), call.q.view(), call.k.view(), call.v.view(),
                                     call.out.view(), {}, options)
                .code(),
            StatusCode::Unsupported);
  EXPECT_EQ(attention::mod_attention(ModKernels{}, call.q.view(), call.k.view(), call.v.view(),
                                     call.out.view(), {})
                .code(),
            StatusCode::InvalidArgument);
  // A prefill kernel that reads key ranges without the kernel that makes them.
  EXPECT_EQ(
      attention::mod_attention(prefill_only("causal", ATTENTION_MOD_KERNEL(mod_causal_prefill)),
                               call.q.view(), call.k.view(), call.v.view(), call.out.view(), {})
          .code(),
      StatusCode::InvalidArgument);
  EXPECT_TRUE(untouched(call.out));
}

// GPU backends: a call runs whole (a mod's tensors may span every batch and head), so its split
// results must fit gpu.workspace_limit: at the limit it matches the reference, below it the call
// is refused before anything is written, naming the option.
TEST_F(ModAttention, GpuWorkspaceLimitHoldsTheWholeCall) {
  const attention::Backend backend = test_backend();
  if (backend != attention::Backend::OpenCL && backend != attention::Backend::CUDA) {
    GTEST_SKIP() << "GPU backends only (the opencl: and cuda: suites)";
  }
  SCOPED_TRACE(seed_note(seed_));
  const Shape s{2, 4, 2, 90, 150, 32, 32};
  std::vector<int32_t> ids = random_document_ids(s.B, s.Sk, 50, rng_);
  const std::vector<ModArgument> arguments = {ModArgument::of_tensor(
      "document_ids", TensorView::contiguous(ids.data(), attention::DType::Int32, {s.B, s.Sk}))};
  const attention_contract::GpuTiling tiling = attention_contract::gpu_tiling(
      backend == attention::Backend::CUDA ? attention_contract::GpuApi::CUDA
                                          : attention_contract::GpuApi::OpenCL,
      /*wide_queries=*/true);
  const int64_t need =
      attention_contract::gpu_split_workspace_bytes(s.B * s.H, s.Sq, s.Sk, s.Dv, tiling);
  for (const int64_t limit : {need, need - 1}) {
    SCOPED_TRACE("workspace_limit " + std::to_string(limit));
    Call call(s, rng_);
    attention::SdpaOptions options;
    options.scale = call.scale;
    options.logsumexp = call.lse.view();
    options.backend = backend;
    options.gpu.workspace_limit = limit;
    const attention::Status status =
        attention::mod_attention(kDocuments(), call.q.view(), call.k.view(), call.v.view(),
                                 call.out.view(), arguments, options);
    if (limit < need) {
      EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
      EXPECT_NE(status.message().find("gpu.workspace_limit"), std::string::npos)
          << status.message();
      EXPECT_TRUE(untouched(call.out));
      continue;
    }
    ASSERT_TRUE(status.ok()) << status.message();
    call.expect_matches({{}, [&](int64_t b, int64_t, int64_t i, int64_t j) {
                           return ids[b * s.Sk + i] == ids[b * s.Sk + j];
                         }});
  }
}

#if ATTENTION_TEST_GPU_MODS
// Kernels run on the backend they were generated for: CPU kernels on a GPU backend, GPU kernels
// on the CPU and a set that mixes backends are refused, out untouched.
TEST_F(ModAttention, KernelsOfAnotherBackendAreRefused) {
  if (test_backend() != attention::Backend::Auto) GTEST_SKIP() << "the CPU suite checks this";
  const Shape s{1, 2, 2, 40, 40, 16, 16};
  Call call(s, rng_);
  const auto run = [&](const ModKernels& kernels, attention::Backend backend) {
    attention::SdpaOptions options;
    options.backend = backend;
    return attention::mod_attention(kernels, call.q.view(), call.k.view(), call.v.view(),
                                    call.out.view(), {}, options);
  };
  if (attention::backend_available(attention::Backend::OpenCL).ok()) {
    const attention::Status cpu_on_gpu = run(kCausal.cpu, attention::Backend::OpenCL);
    EXPECT_EQ(cpu_on_gpu.code(), StatusCode::Unsupported);
    EXPECT_NE(cpu_on_gpu.message().find("generated for the CPU"), std::string::npos)
        << cpu_on_gpu.message();
  }
  const attention::Status gpu_on_cpu = run(kCausal.opencl, attention::Backend::CPU);
  EXPECT_EQ(gpu_on_cpu.code(), StatusCode::Unsupported);
  EXPECT_NE(gpu_on_cpu.message().find("generated for OpenCL"), std::string::npos)
      << gpu_on_cpu.message();
  ModKernels mixed = kCausal.opencl;
  mixed.key_ranges = kCausal.cpu.key_ranges;
  const attention::Status mixes = run(mixed, attention::Backend::Auto);
  EXPECT_EQ(mixes.code(), StatusCode::InvalidArgument);
  EXPECT_NE(mixes.message().find("mixes backends"), std::string::npos) << mixes.message();
  EXPECT_TRUE(untouched(call.out));
}
#endif

}  // namespace
}  // namespace attention_test
