// multi_head_attention against naive double loops (tests/reference/mha_reference.h): projections,
// per-head attention, concatenation and output projection, on fresh random inputs with poisoned
// outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "reference/mha_reference.h"
#include "test_util.h"

namespace attention_test {
namespace {

using attention::TensorView;

struct MhaCase {
  int64_t B, Sq, Sk, E, Ekv, H, Hkv;
  bool packed = false;  // in_proj_weight [E + 2·Hkv·D, E] (needs Ekv == E), else separate
  bool biases = true;
  bool self = false;  // x_kv is x_q
  Layout layout = Layout::kDense;
};

std::string describe(const MhaCase& c) {
  return "B=" + std::to_string(c.B) + " Sq=" + std::to_string(c.Sq) +
         " Sk=" + std::to_string(c.Sk) + " E=" + std::to_string(c.E) +
         " Ekv=" + std::to_string(c.Ekv) + " H=" + std::to_string(c.H) +
         " Hkv=" + std::to_string(c.Hkv) + (c.packed ? " packed" : " separate") +
         (c.biases ? " biases" : "") + (c.self ? " self" : "") + " " + layout_name(c.layout);
}

// A case's tensors, weights uniform in ±1/sqrt(fan-in) as nn.Linear initializes them.
struct MhaTensors {
  MhaTensors(const MhaCase& c, uint64_t seed)
      : x_q({c.B, c.Sq, c.E}, c.layout),
        x_kv({c.B, c.Sk, c.Ekv}, c.layout),
        out({c.B, c.Sq, c.E}, c.layout),
        in_proj({c.E + 2 * kv_width(c), c.E}),
        in_bias({c.E + 2 * kv_width(c)}),
        wq({c.E, c.E}),
        wk({kv_width(c), c.Ekv}),
        wv({kv_width(c), c.Ekv}),
        bq({c.E}),
        bk({kv_width(c)}),
        bv({kv_width(c)}),
        wo({c.E, c.E}),
        bo({c.E}) {
    std::mt19937_64 rng(seed);
    x_q.fill_uniform(rng, -1.0f, 1.0f);
    x_kv.fill_uniform(rng, -1.0f, 1.0f);
    const float rq = 1.0f / std::sqrt(float(c.E)), rkv = 1.0f / std::sqrt(float(c.Ekv));
    for (Tensor* t : {&in_proj, &in_bias, &wq, &bq, &wo, &bo}) t->fill_uniform(rng, -rq, rq);
    for (Tensor* t : {&wk, &wv, &bk, &bv}) t->fill_uniform(rng, -rkv, rkv);
  }
  static int64_t kv_width(const MhaCase& c) { return c.Hkv * (c.E / c.H); }

  TensorView kv_input(const MhaCase& c) { return c.self ? x_q.view() : x_kv.view(); }

  attention::MhaWeights weights(const MhaCase& c) {
    attention::MhaWeights w;
    if (c.packed) {
      w.in_proj_weight = in_proj.view();
      if (c.biases) w.in_proj_bias = in_bias.view();
    } else {
      w.q_proj_weight = wq.view();
      w.k_proj_weight = wk.view();
      w.v_proj_weight = wv.view();
      if (c.biases) {
        w.q_bias = bq.view();
        w.k_bias = bk.view();
        w.v_bias = bv.view();
      }
    }
    w.out_proj_weight = wo.view();
    if (c.biases) w.out_proj_bias = bo.view();
    return w;
  }

  // The reference's explicit views: the packed matrix sliced by rows as PyTorch does (q, k, v).
  ReferenceMhaWeights reference_weights(const MhaCase& c) {
    ReferenceMhaWeights r;
    const int64_t kv = kv_width(c);
    if (c.packed) {
      r.wq = row_slice(in_proj.view(), 0, c.E);
      r.wk = row_slice(in_proj.view(), c.E, kv);
      r.wv = row_slice(in_proj.view(), c.E + kv, kv);
      if (c.biases) {
        r.bq = row_slice(in_bias.view(), 0, c.E);
        r.bk = row_slice(in_bias.view(), c.E, kv);
        r.bv = row_slice(in_bias.view(), c.E + kv, kv);
      }
    } else {
      r.wq = wq.view();
      r.wk = wk.view();
      r.wv = wv.view();
      if (c.biases) {
        r.bq = bq.view();
        r.bk = bk.view();
        r.bv = bv.view();
      }
    }
    r.wo = wo.view();
    if (c.biases) r.bo = bo.view();
    return r;
  }

  static TensorView row_slice(TensorView t, int64_t begin, int64_t count) {
    t.data = static_cast<float*>(t.data) + begin * t.strides[0];
    t.shape[0] = count;
    return t;
  }

  Tensor x_q, x_kv, out, in_proj, in_bias, wq, wk, wv, bq, bk, bv, wo, bo;
};

// multi_head_attention on t's tensors in `dtype`: as they are for Float32, else as half copies
// (inputs rounded in place first, so the reference reads what the call read; out written back).
attention::Status call_in_dtype(MhaTensors& t, const MhaCase& c, attention::MhaOptions options,
                                std::optional<MaskTensors>& masks, attention::DType dtype) {
  if (dtype == attention::DType::Float32) {
    return attention::multi_head_attention(t.x_q.view(), t.kv_input(c), t.weights(c), t.out.view(),
                                           options);
  }
  for (Tensor* input : {&t.x_q, &t.x_kv, &t.in_proj, &t.in_bias, &t.wq, &t.wk, &t.wv, &t.bq, &t.bk,
                        &t.bv, &t.wo, &t.bo}) {
    for (float& x : input->storage()) x = round_to(dtype, x);
  }
  attention::MhaWeights w = t.weights(c);
  std::vector<HalfCopy> copies;
  copies.reserve(16);
  const auto half = [&](TensorView& view) {
    if (view.data == nullptr) return;
    view = copies.emplace_back(view, dtype).view();
  };
  for (TensorView* view :
       {&w.in_proj_weight, &w.in_proj_bias, &w.q_proj_weight, &w.k_proj_weight, &w.v_proj_weight,
        &w.q_bias, &w.k_bias, &w.v_bias, &w.out_proj_weight, &w.out_proj_bias}) {
    half(*view);
  }
  if (masks) {
    for (float& x : masks->additive_mask) x = round_to(dtype, x);
    half(options.mask.additive_mask);
  }
  TensorView x_q = t.x_q.view(), x_kv = t.x_kv.view();
  half(x_q);
  if (c.self) {
    x_kv = x_q;
  } else {
    half(x_kv);
  }
  HalfCopy& out = copies.emplace_back(t.out.view(), dtype);
  const attention::Status status =
      attention::multi_head_attention(x_q, x_kv, w, out.view(), options);
  out.write_back();
  return status;
}

void expect_matches_reference(const MhaCase& c, const MaskSpec* spec, uint64_t seed) {
  SCOPED_TRACE(describe(c) + (spec ? " mask " + describe(*spec) : "") + " " + seed_note(seed));
  if (skip_unless_backend_available()) return;
  MhaTensors t(c, seed);
  attention::MhaOptions options;
  options.backend = test_backend();
  options.num_heads = c.H;
  options.num_kv_heads = c.Hkv;
  options.gpu = test_gpu_options(c.H, c.Sq, c.Sk, c.E / c.H, spec != nullptr, /*mha=*/true);
  std::optional<MaskTensors> masks;
  if (spec != nullptr) {
    masks.emplace(*spec, sdpa_case(c.B, c.H, c.Hkv, c.Sq, c.Sk, c.E / c.H, c.E / c.H), seed + 1);
    options.mask = masks->options;
  }
  t.out.poison();
  const attention::DType dtype = test_dtype();
  const attention::Status status = call_in_dtype(t, c, options, masks, dtype);
  ASSERT_TRUE(status.ok()) << status.message();
  std::vector<double> expected;
  reference_mha(t.x_q.view(), t.kv_input(c), t.reference_weights(c), c.H, c.Hkv,
                1.0 / std::sqrt(double(c.E / c.H)), spec ? &options.mask : nullptr, &expected,
                nullptr);
  if (dtype == attention::DType::Float32) {
    EXPECT_TRUE(matches_reference(t.out.to_dense(), expected, t.out.shape()));
  } else {
    EXPECT_TRUE(matches_half_reference(t.out.to_dense(), expected, t.out.shape(), dtype));
  }
  EXPECT_TRUE(t.out.outside_view_holds(std::numeric_limits<float>::quiet_NaN()));
}

// Self and cross attention, packed and separate weights, GQA and MQA, odd E (3 heads × 59),
// Ekv != E, decode (Sq = 1), with and without biases, padded layouts.
TEST(MultiHeadAttention, MatchesReference) {
  const uint64_t seed = seed_for_current_test();
  const MhaCase cases[] = {
      {2, 37, 37, 177, 177, 3, 3, true, true, true},
      {1, 20, 45, 64, 40, 4, 4, false, true},
      {2, 33, 70, 96, 96, 8, 2, true, false, false, Layout::kPadded},
      {1, 1, 600, 128, 128, 4, 1, false, true},
      {3, 2, 31, 48, 72, 6, 3, false, false},
      {1, 130, 530, 256, 256, 4, 4, true, true},
  };
  for (const MhaCase& c : cases) expect_matches_reference(c, nullptr, seed);
}

// The masks of masked attention with H heads: causal with key padding, broadcast mask tensors.
TEST(MultiHeadAttention, MasksMatchReference) {
  const uint64_t seed = seed_for_current_test();
  MaskSpec causal;
  causal.causal = attention::Causal::BottomRight;
  causal.key_lengths = true;
  MaskSpec tensors;
  tensors.bool_mask = true;
  tensors.additive_mask = true;
  tensors.mask_head_broadcast = true;
  // Pieces that hide no key (dropped before the kernel runs): bottom-right causal on one row with
  // full key lengths and a window past the first key; one key short of that keeps the window.
  MaskSpec inert;
  inert.causal = attention::Causal::BottomRight;
  inert.key_lengths = inert.full_lengths = true;
  inert.window = 69;
  MaskSpec short_window = inert;
  short_window.window = 68;
  for (const MhaCase& c : {MhaCase{2, 40, 40, 96, 96, 4, 2, true, true, true},
                           MhaCase{2, 1, 70, 60, 36, 3, 3, false, true}}) {
    for (const MaskSpec* spec : {&causal, &tensors, &inert, &short_window})
      expect_matches_reference(c, spec, seed);
  }
}

// A call without keys: every row's attention is zeros, so out is the output bias (zeros
// without biases).
TEST(MultiHeadAttention, NoKeysOutputsTheOutputBias) {
  const uint64_t seed = seed_for_current_test();
  for (bool biases : {true, false}) {
    for (Layout layout : {Layout::kDense, Layout::kPadded}) {
      expect_matches_reference(MhaCase{2, 3, 0, 24, 16, 2, 2, false, biases, false, layout},
                               nullptr, seed);
    }
  }
}

// Keys a mask hides never reach a row, even where their projected values are not finite: the
// rows of x_kv at the keys a boolean mask hides hold Inf and NaN, amid keys every row sees (so
// block skipping cannot step over them). The projections happen inside the kernel, so the runtime
// cannot scan V itself; it must still pick the NaN-safe P·V.
TEST(MultiHeadAttention, NonFiniteValuesAtHiddenKeysStayHidden) {
  const uint64_t seed = seed_for_current_test();
  const MhaCase c{2, 60, 40, 32, 24, 4, 2, false, true};
  SCOPED_TRACE(describe(c) + " " + seed_note(seed));
  MhaTensors t(c, seed);
  std::vector<uint8_t> allowed(static_cast<size_t>(c.B * c.Sq * c.Sk), 1);  // [B, 1, Sq, Sk]
  float* x_kv = static_cast<float*>(t.x_kv.view().data);
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t j = 5 + b; j < c.Sk; j += 7) {
      for (int64_t i = 0; i < c.Sq; ++i) allowed[(b * c.Sq + i) * c.Sk + j] = 0;
      for (int64_t e = 0; e < c.Ekv; ++e) {
        x_kv[(b * c.Sk + j) * c.Ekv + e] = j % 2 ? std::numeric_limits<float>::quiet_NaN()
                                                 : std::numeric_limits<float>::infinity();
      }
    }
  }
  attention::MhaOptions options;
  options.num_heads = c.H;
  options.num_kv_heads = c.Hkv;
  options.mask.bool_mask =
      TensorView::contiguous(allowed.data(), attention::DType::Bool, {c.B, 1, c.Sq, c.Sk});
  t.out.poison();
  ASSERT_TRUE(attention::multi_head_attention(t.x_q.view(), t.x_kv.view(), t.weights(c),
                                              t.out.view(), options)
                  .ok());
  std::vector<double> expected;
  reference_mha(t.x_q.view(), t.x_kv.view(), t.reference_weights(c), c.H, c.Hkv,
                1.0 / std::sqrt(double(c.E / c.H)), &options.mask, &expected, nullptr);
  EXPECT_TRUE(matches_reference(t.out.to_dense(), expected, t.out.shape()));
}

// Strided biases (a column of a bigger matrix) read like contiguous ones.
TEST(MultiHeadAttention, StridedBiasesMatchReference) {
  const uint64_t seed = seed_for_current_test();
  const MhaCase c{1, 7, 9, 24, 24, 2, 2, false, true};
  SCOPED_TRACE(describe(c) + " " + seed_note(seed));
  MhaTensors t(c, seed);
  // Each bias as the first column of a [N, 2] matrix holding it and its negation.
  std::vector<std::vector<float>> storage;
  auto strided = [&storage](Tensor& bias) {
    const std::vector<float> values = bias.to_dense();
    std::vector<float>& columns = storage.emplace_back();
    for (float v : values) columns.insert(columns.end(), {v, -v});
    return TensorView::strided(columns.data(), {int64_t(values.size())}, {2});
  };
  storage.reserve(4);
  attention::MhaWeights w = t.weights(c);
  w.q_bias = strided(t.bq);
  w.k_bias = strided(t.bk);
  w.v_bias = strided(t.bv);
  w.out_proj_bias = strided(t.bo);
  attention::MhaOptions options;
  options.num_heads = c.H;
  t.out.poison();
  ASSERT_TRUE(
      attention::multi_head_attention(t.x_q.view(), t.x_kv.view(), w, t.out.view(), options).ok());
  std::vector<double> expected;
  reference_mha(t.x_q.view(), t.x_kv.view(), t.reference_weights(c), c.H, c.Hkv,
                1.0 / std::sqrt(double(c.E / c.H)), nullptr, &expected, nullptr);
  EXPECT_TRUE(matches_reference(t.out.to_dense(), expected, t.out.shape()));
}

// PyTorch's packed in_proj_weight holds W_q, W_k, W_v as consecutive row blocks: the result with
// it must equal the result with the three blocks copied into separate matrices, bit for bit, and
// differ when two blocks are swapped (the split is not symmetric by accident).
TEST(MultiHeadAttention, PackedInProjWeightSplitsLikePyTorch) {
  const uint64_t seed = seed_for_current_test();
  const MhaCase packed{2, 16, 16, 64, 64, 4, 4, true, true, true};
  MhaTensors t(packed, seed);
  attention::MhaOptions options;
  options.num_heads = 4;
  t.out.poison();
  ASSERT_TRUE(attention::multi_head_attention(t.x_q.view(), t.x_q.view(), t.weights(packed),
                                              t.out.view(), options)
                  .ok());
  const std::vector<float> with_packed = t.out.to_dense();

  // The same numbers copied block by block into separate weights.
  MhaCase separate = packed;
  separate.packed = false;
  const std::vector<float> in_proj = t.in_proj.to_dense(), in_bias = t.in_bias.to_dense();
  const int64_t E = 64;
  auto copy_block = [&](Tensor& dst, Tensor& bias, int64_t block) {
    dst.fill([&](const Index& e) { return in_proj[(block * E + e[0]) * E + e[1]]; });
    bias.fill([&](const Index& e) { return in_bias[block * E + e[0]]; });
  };
  copy_block(t.wq, t.bq, 0);
  copy_block(t.wk, t.bk, 1);
  copy_block(t.wv, t.bv, 2);
  t.out.poison();
  ASSERT_TRUE(attention::multi_head_attention(t.x_q.view(), t.x_q.view(), t.weights(separate),
                                              t.out.view(), options)
                  .ok());
  EXPECT_TRUE(same_bits(with_packed, t.out.to_dense()));

  copy_block(t.wk, t.bk, 2);  // k and v swapped
  copy_block(t.wv, t.bv, 1);
  t.out.poison();
  ASSERT_TRUE(attention::multi_head_attention(t.x_q.view(), t.x_q.view(), t.weights(separate),
                                              t.out.view(), options)
                  .ok());
  EXPECT_FALSE(same_bits(with_packed, t.out.to_dense()));
}

// need_weights: per head [B, H, Sq, Sk] and averaged over heads [B, Sq, Sk].
TEST(MultiHeadAttention, AttentionWeightsMatchReference) {
  const uint64_t seed = seed_for_current_test();
  MaskSpec causal;
  causal.causal = attention::Causal::TopLeft;
  for (const MhaCase& c : {MhaCase{2, 21, 21, 48, 48, 4, 2, true, true, true},
                           MhaCase{1, 1, 300, 60, 30, 3, 3, false, true}}) {
    SCOPED_TRACE(describe(c) + " " + seed_note(seed));
    MhaTensors t(c, seed);
    MaskTensors masks(causal, sdpa_case(c.B, c.H, c.Hkv, c.Sq, c.Sk, c.E / c.H, c.E / c.H), seed);
    std::vector<double> expected_out, expected_weights;
    reference_mha(t.x_q.view(), t.kv_input(c), t.reference_weights(c), c.H, c.Hkv,
                  1.0 / std::sqrt(double(c.E / c.H)), &masks.options, &expected_out,
                  &expected_weights);
    std::vector<double> expected_mean(static_cast<size_t>(c.B * c.Sq * c.Sk), 0.0);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t n = 0; n < c.Sq * c.Sk; ++n)
          expected_mean[b * c.Sq * c.Sk + n] +=
              expected_weights[(b * c.H + h) * c.Sq * c.Sk + n] / c.H;
    for (bool averaged : {false, true}) {
      Tensor weights(averaged ? std::vector<int64_t>{c.B, c.Sq, c.Sk}
                              : std::vector<int64_t>{c.B, c.H, c.Sq, c.Sk});
      attention::MhaOptions options;
      options.num_heads = c.H;
      options.num_kv_heads = c.Hkv;
      options.mask = masks.options;
      options.attention_weights = weights.view();
      weights.poison();
      t.out.poison();
      ASSERT_TRUE(attention::multi_head_attention(t.x_q.view(), t.kv_input(c), t.weights(c),
                                                  t.out.view(), options)
                      .ok());
      EXPECT_TRUE(matches_reference(t.out.to_dense(), expected_out, t.out.shape()));
      EXPECT_TRUE(matches_reference(weights.to_dense(), averaged ? expected_mean : expected_weights,
                                    weights.shape()))
          << (averaged ? "averaged" : "per head");
    }
  }
}

// The randomized sweep: self/cross, packed/separate, GQA ratios, odd widths, biases, layouts and
// masks drawn at random (the seed is printed; one failing case stops the shard).
class MhaSweep : public ::testing::TestWithParam<int> {};

TEST_P(MhaSweep, RandomCasesMatchReference) {
  std::mt19937_64 rng(seed_for_current_test());
  auto pick = [&](int64_t low, int64_t high) {
    return std::uniform_int_distribution<int64_t>(low, high)(rng);
  };
  auto coin = [&] { return pick(0, 1) == 1; };
  for (int n = 0; n < 40; ++n) {
    MhaCase c{};
    c.B = pick(1, 3);
    c.H = pick(1, 6);
    const int64_t divisors[] = {1, 2, 3, 6};
    do {
      c.Hkv = divisors[pick(0, 3)];
    } while (c.H % c.Hkv != 0);
    c.E = c.H * pick(1, 24);
    c.self = coin();
    c.Sq = pick(1, 40);
    c.Sk = c.self ? c.Sq : pick(1, 80);
    c.Ekv = c.self || coin() ? c.E : pick(1, 50);
    c.packed = c.Ekv == c.E && coin();
    c.biases = coin();
    c.layout = coin() ? Layout::kPadded : Layout::kDense;
    MaskSpec mask;
    mask.causal = coin() ? attention::Causal::BottomRight : attention::Causal::None;
    mask.key_lengths = coin();
    mask.bool_mask = pick(0, 3) == 0;
    mask.mask_head_broadcast = coin();
    expect_matches_reference(c, pick(0, 2) == 0 ? nullptr : &mask, rng());
    if (HasFailure()) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, MhaSweep, ::testing::Range(0, 3));

// Each bad argument is named, and out stays untouched.
TEST(MultiHeadAttention, RejectsBadArguments) {
  const MhaCase c{1, 4, 5, 12, 8, 3, 3};
  MhaTensors t(c, 1);
  t.out.poison();
  auto expect_error = [&](const attention::MhaWeights& w, const attention::MhaOptions& o,
                          const std::string& name) {
    const attention::Status status =
        attention::multi_head_attention(t.x_q.view(), t.x_kv.view(), w, t.out.view(), o);
    ASSERT_FALSE(status.ok()) << name;
    EXPECT_NE(status.message().find(name), std::string::npos) << status.message();
    for (float x : t.out.to_dense()) EXPECT_TRUE(std::isnan(x)) << name;
  };
  attention::MhaOptions options;
  options.num_heads = 3;
  const attention::MhaWeights good = t.weights(c);
  {
    attention::MhaOptions o = options;
    o.num_heads = 5;  // does not divide E = 12
    expect_error(good, o, "options.num_heads");
    o.num_heads = 3;
    o.num_kv_heads = 2;  // does not divide 3
    expect_error(good, o, "options.num_kv_heads");
  }
  {
    attention::MhaWeights w = good;
    w.in_proj_weight = t.in_proj.view();  // packed and separate at once
    expect_error(w, options, "weights");
    w = {};
    w.in_proj_weight = t.in_proj.view();
    w.out_proj_weight = t.wo.view();
    expect_error(w, options, "weights.in_proj_weight");  // packed needs Ekv == E (8 != 12)
  }
  {
    attention::MhaWeights w = good;
    w.k_proj_weight = t.wq.view();  // [E, E], not [Hkv·D, Ekv]
    expect_error(w, options, "weights.k_proj_weight");
    w = good;
    w.v_bias = t.x_kv.view();  // rank 3, not [Hkv·D]
    expect_error(w, options, "weights.v_bias");
    w = good;
    w.out_proj_weight = TensorView{};
    expect_error(w, options, "weights.out_proj_weight");
  }
  {
    attention::MhaOptions o = options;
    Tensor weights({c.B, c.Sq, c.Sk + 1});
    o.attention_weights = weights.view();
    expect_error(good, o, "options.attention_weights");
  }
}

}  // namespace
}  // namespace attention_test
