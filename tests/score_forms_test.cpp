// dot_product_attention, bilinear_attention and additive_attention against the double-precision
// loops of reference_attention (tests/reference/sdpa_reference.h) with each form's score written
// out naively, on fresh random inputs with poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "reference/sdpa_reference.h"
#include "test_util.h"

namespace attention_test {
namespace {

using attention::TensorView;

enum class Form { Dot, Bilinear, Additive };

const char* form_name(Form form) {
  switch (form) {
    case Form::Dot:
      return "dot";
    case Form::Bilinear:
      return "bilinear";
    case Form::Additive:
      return "additive";
  }
  return "?";
}

struct FormCase {
  int64_t B, Sq, Sk, Dq, Dk, Dv;
  int64_t A = 1;  // additive: attention dim
  Layout layout = Layout::kDense;
};

std::string describe(const FormCase& c, Form form) {
  return std::string(form_name(form)) + " B=" + std::to_string(c.B) +
         " Sq=" + std::to_string(c.Sq) + " Sk=" + std::to_string(c.Sk) +
         " Dq=" + std::to_string(c.Dq) + " Dk=" + std::to_string(c.Dk) +
         " Dv=" + std::to_string(c.Dv) + " A=" + std::to_string(c.A) + " " + layout_name(c.layout);
}

// Element (i, j) of a rank-2 view or (b, s, d) of a rank-3 one, through its strides.
double at(const TensorView& t, int64_t i, int64_t j) {
  return static_cast<const float*>(t.data)[i * t.strides[0] + j * t.strides[1]];
}
double at(const TensorView& t, int64_t b, int64_t s, int64_t d) {
  return static_cast<const float*>(t.data)[b * t.strides[0] + s * t.strides[1] + d * t.strides[2]];
}
double at(const TensorView& t, int64_t i) {
  return static_cast<const float*>(t.data)[i * t.strides[0]];
}

// The inputs and outputs of one call, with every form's weights; inputs uniform in [-1, 1]
// (weights scaled by 1/sqrt of their inner size, so scores stay O(1)).
struct FormTensors {
  FormTensors(const FormCase& c, uint64_t seed)
      : q({c.B, c.Sq, c.Dq}, c.layout),
        k({c.B, c.Sk, c.Dk}, c.layout),
        v({c.B, c.Sk, c.Dv}, c.layout),
        out({c.B, c.Sq, c.Dv}, c.layout),
        lse({c.B, c.Sq}, c.layout),
        bilinear({c.Dq, c.Dk}),
        query_weight({c.A, c.Dq}),
        key_weight({c.A, c.Dk}),
        score_weight({c.A}),
        bias({c.A}) {
    std::mt19937_64 rng(seed);
    for (Tensor* t : {&q, &k, &v}) t->fill_uniform(rng, -1.0f, 1.0f);
    auto scaled = [&](Tensor& t, int64_t inner) {
      const float r = 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(inner, 1)));
      t.fill_uniform(rng, -r, r);
    };
    scaled(bilinear, c.Dq);
    scaled(query_weight, c.Dq);
    scaled(key_weight, c.Dk);
    scaled(score_weight, 1);
    scaled(bias, 1);
  }
  Tensor q, k, v, out, lse, bilinear, query_weight, key_weight, score_weight, bias;
};

// The form's score of query i and key j of batch b, in double, written the naive way.
PairScore naive_score(Form form, FormTensors& t, const FormCase& c, bool with_bias) {
  const TensorView q = t.q.view(), k = t.k.view();
  switch (form) {
    case Form::Dot:
      return [=](int64_t b, int64_t, int64_t i, int64_t j) {
        double s = 0;
        for (int64_t d = 0; d < c.Dq; ++d) s += at(q, b, i, d) * at(k, b, j, d);
        return s;
      };
    case Form::Bilinear: {
      const TensorView w = t.bilinear.view();
      return [=](int64_t b, int64_t, int64_t i, int64_t j) {
        double s = 0;
        for (int64_t d = 0; d < c.Dq; ++d)
          for (int64_t e = 0; e < c.Dk; ++e) s += at(q, b, i, d) * at(w, d, e) * at(k, b, j, e);
        return s;
      };
    }
    case Form::Additive: {
      const TensorView wq = t.query_weight.view(), wk = t.key_weight.view();
      const TensorView wa = t.score_weight.view(), bias = t.bias.view();
      return [=](int64_t b, int64_t, int64_t i, int64_t j) {
        double s = 0;
        for (int64_t a = 0; a < c.A; ++a) {
          double pre = with_bias ? at(bias, a) : 0.0;
          for (int64_t d = 0; d < c.Dq; ++d) pre += at(wq, a, d) * at(q, b, i, d);
          for (int64_t e = 0; e < c.Dk; ++e) pre += at(wk, a, e) * at(k, b, j, e);
          s += at(wa, a) * std::tanh(pre);
        }
        return s;
      };
    }
  }
  return {};
}

attention::Status call(Form form, FormTensors& t, bool with_bias,
                       const attention::ScoreFormOptions& options) {
  switch (form) {
    case Form::Dot:
      return attention::dot_product_attention(t.q.view(), t.k.view(), t.v.view(), t.out.view(),
                                              options);
    case Form::Bilinear:
      return attention::bilinear_attention(t.q.view(), t.k.view(), t.v.view(), t.bilinear.view(),
                                           t.out.view(), options);
    case Form::Additive: {
      attention::AdditiveWeights w;
      w.query_weight = t.query_weight.view();
      w.key_weight = t.key_weight.view();
      w.score_weight = t.score_weight.view();
      if (with_bias) w.bias = t.bias.view();
      return attention::additive_attention(t.q.view(), t.k.view(), t.v.view(), w, t.out.view(),
                                           options);
    }
  }
  return attention::Status::invalid("unknown form");
}

// A case's SdpaCase twin (one head), for the mask helpers.
SdpaCase one_head_case(const FormCase& c) { return sdpa_case(c.B, 1, 1, c.Sq, c.Sk, c.Dq, c.Dv); }

void expect_matches_reference(Form form, const FormCase& c, const MaskSpec* spec, bool with_bias,
                              uint64_t seed) {
  SCOPED_TRACE(describe(c, form) + (spec ? " mask " + describe(*spec) : "") +
               (with_bias ? " bias" : "") + " " + seed_note(seed));
  FormTensors t(c, seed);
  attention::ScoreFormOptions options;
  options.logsumexp = t.lse.view();
  std::optional<MaskTensors> masks;
  if (spec != nullptr) {
    masks.emplace(*spec, one_head_case(c), seed + 1);
    options.mask = masks->options;
  }
  t.out.poison();
  t.lse.poison();
  const attention::Status status = call(form, t, with_bias, options);
  ASSERT_TRUE(status.ok()) << status.message();
  std::vector<double> expected_out, expected_lse;
  reference_attention(naive_score(form, t, c, with_bias), 1, c.Sq, with_one_head(t.v.view()),
                      &expected_out, &expected_lse, spec ? &options.mask : nullptr);
  EXPECT_TRUE(matches_reference(t.out.to_dense(), expected_out, t.out.shape()));
  EXPECT_TRUE(matches_reference(t.lse.to_dense(), expected_lse, t.lse.shape(), Domain::Log));
  EXPECT_TRUE(t.out.outside_view_holds(std::numeric_limits<float>::quiet_NaN()));
}

constexpr Form kForms[] = {Form::Dot, Form::Bilinear, Form::Additive};

// Odd sizes, decode (Sq 1, 2), prefill and decode key splits (Sk > 512), Dq != Dk (not for dot),
// strided layouts.
std::vector<FormCase> cases_for(Form form) {
  std::vector<FormCase> cases = {
      {1, 37, 29, 13, 13, 7, 5}, {2, 1, 300, 16, 16, 9, 11, Layout::kPadded},
      {2, 2, 41, 8, 8, 3, 64},   {1, 60, 1100, 24, 24, 17, 32},
      {1, 1, 2000, 5, 5, 4, 3},  {3, 50, 13, 64, 64, 64, 16, Layout::kPadded},
  };
  if (form != Form::Dot) {
    for (FormCase& c : cases) c.Dk = c.Dq + 3;
  }
  return cases;
}

TEST(ScoreForms, MatchReference) {
  const uint64_t seed = seed_for_current_test();
  for (Form form : kForms) {
    for (const FormCase& c : cases_for(form)) {
      expect_matches_reference(form, c, nullptr, form == Form::Additive, seed);
    }
  }
}

// The masks of the SDPA forms, with H = 1: causal and window, key/query lengths (some rows see no
// key: zeros and -inf), boolean and additive tensors broadcast over the batch, ALiBi, softcap.
TEST(ScoreForms, MasksMatchReference) {
  const uint64_t seed = seed_for_current_test();
  MaskSpec causal_lengths;
  causal_lengths.causal = attention::Causal::BottomRight;
  causal_lengths.key_lengths = true;
  causal_lengths.query_lengths = true;
  MaskSpec tensors;
  tensors.bool_mask = true;
  tensors.additive_mask = true;
  tensors.mask_batch_broadcast = true;
  MaskSpec window;
  window.causal = attention::Causal::TopLeft;
  window.window = 7;
  window.alibi = true;
  window.softcap = 5.0f;
  for (Form form : kForms) {
    for (const FormCase& c : {FormCase{2, 45, 700, 6, 6, 5, 9}, FormCase{3, 1, 530, 4, 4, 8, 7},
                              FormCase{1, 20, 20, 3, 3, 2, 4}}) {
      FormCase shaped = c;
      if (form != Form::Dot) shaped.Dk = c.Dq + 2;
      for (const MaskSpec* spec : {&causal_lengths, &tensors, &window}) {
        expect_matches_reference(form, shaped, spec, false, seed);
      }
    }
  }
}

// The attention weights output (the alignment matrix) of each form, with and without masks: rows
// sum to 1, hidden keys are exactly 0, rows without keys all 0.
TEST(ScoreForms, WeightsMatchReference) {
  const uint64_t seed = seed_for_current_test();
  MaskSpec lengths;
  lengths.causal = attention::Causal::TopLeft;
  lengths.key_lengths = true;
  lengths.bool_mask = true;
  for (Form form : kForms) {
    for (const FormCase& c : {FormCase{2, 33, 45, 6, 6, 5, 7}, FormCase{1, 1, 700, 4, 4, 3, 9},
                              FormCase{3, 60, 1030, 8, 8, 2, 16, Layout::kPadded}}) {
      FormCase shaped = c;
      if (form != Form::Dot) shaped.Dk = c.Dq + 1;
      for (const MaskSpec* spec :
           {static_cast<const MaskSpec*>(nullptr), static_cast<const MaskSpec*>(&lengths)}) {
        SCOPED_TRACE(describe(shaped, form) + (spec ? " mask " + describe(*spec) : "") + " " +
                     seed_note(seed));
        FormTensors t(shaped, seed);
        Tensor weights({shaped.B, shaped.Sq, shaped.Sk}, shaped.layout);
        attention::ScoreFormOptions options;
        options.weights = weights.view();
        std::optional<MaskTensors> masks;
        if (spec != nullptr) {
          masks.emplace(*spec, one_head_case(shaped), seed + 2);
          options.mask = masks->options;
        }
        weights.poison();
        t.out.poison();
        const attention::Status status = call(form, t, false, options);
        ASSERT_TRUE(status.ok()) << status.message();
        std::vector<double> expected_out, expected_weights;
        reference_attention(naive_score(form, t, shaped, false), 1, shaped.Sq,
                            with_one_head(t.v.view()), &expected_out, nullptr,
                            spec ? &options.mask : nullptr, &expected_weights);
        EXPECT_TRUE(matches_reference(t.out.to_dense(), expected_out, t.out.shape()));
        EXPECT_TRUE(matches_reference(weights.to_dense(), expected_weights, weights.shape()));
        const std::vector<float> got = weights.to_dense();
        for (size_t n = 0; n < got.size(); ++n) {
          if (expected_weights[n] == 0.0) {
            ASSERT_EQ(got[n], 0.0f) << "element " << n;
          }
        }
        EXPECT_TRUE(weights.outside_view_holds(std::numeric_limits<float>::quiet_NaN()));
      }
    }
  }
}

// Every key out of reach for a whole batch: its rows are zeros with logsumexp -inf, whatever the
// form; the other batch is unaffected.
TEST(ScoreForms, RowsWithoutKeysAreZeros) {
  const uint64_t seed = seed_for_current_test();
  for (Form form : kForms) {
    const FormCase c{2, 5, 9, 4, form == Form::Dot ? 4 : 6, 3, 5};
    FormTensors t(c, seed);
    std::vector<int32_t> lengths = {0, 9};
    attention::ScoreFormOptions options;
    options.logsumexp = t.lse.view();
    options.mask.key_lengths = TensorView::contiguous(lengths.data(), attention::DType::Int32, {2});
    t.out.poison();
    t.lse.poison();
    ASSERT_TRUE(call(form, t, false, options).ok()) << form_name(form);
    const std::vector<float> out = t.out.to_dense(), lse = t.lse.to_dense();
    for (int64_t n = 0; n < c.Sq * c.Dv; ++n) EXPECT_EQ(out[n], 0.0f) << form_name(form);
    for (int64_t i = 0; i < c.Sq; ++i) {
      EXPECT_EQ(lse[i], -std::numeric_limits<float>::infinity()) << form_name(form);
      EXPECT_TRUE(std::isfinite(lse[c.Sq + i])) << form_name(form);
    }
  }
}

// A bilinear weight read through a transposed view gives the same result as its dense copy.
TEST(ScoreForms, BilinearWeightAnyStrides) {
  const uint64_t seed = seed_for_current_test();
  const FormCase c{2, 30, 40, 7, 10, 5};
  FormTensors t(c, seed);
  Tensor transposed_storage({c.Dk, c.Dq});
  const TensorView w = t.bilinear.view();
  transposed_storage.fill([&](const Index& e) { return static_cast<float>(at(w, e[1], e[0])); });
  TensorView w_t = transposed_storage.view();
  std::swap(w_t.shape[0], w_t.shape[1]);
  std::swap(w_t.strides[0], w_t.strides[1]);  // [Dq, Dk] again, column-major
  t.out.poison();
  ASSERT_TRUE(attention::bilinear_attention(t.q.view(), t.k.view(), t.v.view(), t.bilinear.view(),
                                            t.out.view())
                  .ok());
  const std::vector<float> dense = t.out.to_dense();
  t.out.poison();
  ASSERT_TRUE(
      attention::bilinear_attention(t.q.view(), t.k.view(), t.v.view(), w_t, t.out.view()).ok());
  EXPECT_TRUE(same_bits(dense, t.out.to_dense()));
}

// Each bad argument is named, and out stays untouched.
TEST(ScoreForms, RejectsBadArguments) {
  const FormCase c{1, 4, 6, 3, 5, 2, 4};
  FormTensors t(c, 1);
  Tensor wrong({4, 4});
  wrong.fill_storage(0.5f);
  t.out.poison();
  auto expect_error = [&](const attention::Status& status, const std::string& name) {
    ASSERT_FALSE(status.ok()) << name;
    EXPECT_NE(status.message().find(name), std::string::npos) << status.message();
    const std::vector<float> out = t.out.to_dense();
    for (float x : out) EXPECT_TRUE(std::isnan(x)) << name;
  };
  expect_error(attention::dot_product_attention(t.q.view(), t.k.view(), t.v.view(), t.out.view()),
               "k");  // Dk != Dq
  expect_error(
      attention::bilinear_attention(t.q.view(), t.k.view(), t.v.view(), wrong.view(), t.out.view()),
      "weight");
  attention::AdditiveWeights w;
  w.query_weight = t.query_weight.view();
  w.key_weight = t.key_weight.view();
  w.score_weight = t.score_weight.view();
  w.bias = wrong.view();  // rank 2
  expect_error(attention::additive_attention(t.q.view(), t.k.view(), t.v.view(), w, t.out.view()),
               "weights.bias");
  w.bias = TensorView{};
  w.key_weight = t.query_weight.view();  // [A, Dq], not [A, Dk]
  expect_error(attention::additive_attention(t.q.view(), t.k.view(), t.v.view(), w, t.out.view()),
               "weights.key_weight");
  w.key_weight = t.key_weight.view();
  attention::ScoreFormOptions options;
  std::vector<uint8_t> allowed(2 * c.Sq * c.Sk, 1);  // H = 2: these forms have one head
  options.mask.bool_mask =
      TensorView::contiguous(allowed.data(), attention::DType::Bool, {1, 2, c.Sq, c.Sk});
  expect_error(
      attention::additive_attention(t.q.view(), t.k.view(), t.v.view(), w, t.out.view(), options),
      "mask.bool_mask");
  options.mask = {};
  Tensor weights({c.B, c.Sq, c.Sk + 1});  // one key too many
  options.weights = weights.view();
  expect_error(
      attention::additive_attention(t.q.view(), t.k.view(), t.v.view(), w, t.out.view(), options),
      "options.weights");
  // Weights [B, Sq, Sk] over the memory of q, an input (rejected before anything is touched).
  options.weights = TensorView::contiguous(static_cast<float*>(t.q.view().data), {1, 4, 6});
  expect_error(
      attention::additive_attention(t.q.view(), t.k.view(), t.v.view(), w, t.out.view(), options),
      "options.weights");
}

}  // namespace
}  // namespace attention_test
