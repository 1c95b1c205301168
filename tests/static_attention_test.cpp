// static_attention and factorized_static_attention against naive double loops: softmax over each
// row of W (W₁·W₂ formed in double), times X, on fresh random inputs with poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "test_util.h"

namespace attention_test {
namespace {

using attention::TensorView;

double element(const TensorView& t, int64_t i, int64_t j) {
  return static_cast<const float*>(t.data)[i * t.strides[0] + j * t.strides[1]];
}

// out [B, Sq, D] = softmax_rows(W) · X[b] in double; a row of W that is all -inf gives zeros.
std::vector<double> reference_static(const std::vector<double>& w, int64_t Sq, int64_t Sk,
                                     const TensorView& x) {
  const int64_t B = x.shape[0], D = x.shape[2];
  std::vector<double> out(static_cast<size_t>(B * Sq * D), 0.0);
  for (int64_t i = 0; i < Sq; ++i) {
    double row_max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < Sk; ++j) row_max = std::max(row_max, w[i * Sk + j]);
    if (row_max == -std::numeric_limits<double>::infinity()) continue;
    std::vector<double> p(static_cast<size_t>(Sk));
    double sum = 0.0;
    for (int64_t j = 0; j < Sk; ++j) sum += p[j] = std::exp(w[i * Sk + j] - row_max);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0.0;
        for (int64_t j = 0; j < Sk; ++j) {
          acc += p[j] * static_cast<const float*>(
                            x.data)[b * x.strides[0] + j * x.strides[1] + d * x.strides[2]];
        }
        out[(b * Sq + i) * D + d] = acc / sum;
      }
  }
  return out;
}

struct StaticCase {
  int64_t B, Sq, Sk, D, R;
  Layout layout = Layout::kDense;
};

std::string describe(const StaticCase& c) {
  return "B=" + std::to_string(c.B) + " Sq=" + std::to_string(c.Sq) +
         " Sk=" + std::to_string(c.Sk) + " D=" + std::to_string(c.D) + " R=" + std::to_string(c.R) +
         " " + layout_name(c.layout);
}

const StaticCase kCases[] = {
    {1, 1, 1, 1, 1},   {2, 37, 29, 13, 5, Layout::kPadded}, {3, 100, 700, 64, 16},
    {1, 5, 300, 3, 2}, {4, 64, 64, 7, 64, Layout::kPadded}, {2, 130, 9, 40, 3},
};

TEST(StaticAttention, MatchesReference) {
  const uint64_t seed = seed_for_current_test();
  for (const StaticCase& c : kCases) {
    SCOPED_TRACE(describe(c) + " " + seed_note(seed));
    std::mt19937_64 rng(seed);
    Tensor w({c.Sq, c.Sk}), x({c.B, c.Sk, c.D}, c.layout), out({c.B, c.Sq, c.D}, c.layout);
    w.fill_uniform(rng, -3.0f, 3.0f);
    x.fill_uniform(rng, -1.0f, 1.0f);
    // Some entries hidden (-inf), and the last row hidden entirely: zeros.
    const TensorView wv = w.view();
    w.fill([&](const Index& e) {
      const float value = static_cast<float>(element(wv, e[0], e[1]));
      const bool hidden = e[0] == c.Sq - 1 && c.Sq > 1 ? true : (e[0] * 7 + e[1] * 3) % 11 == 0;
      return hidden ? -std::numeric_limits<float>::infinity() : value;
    });
    std::vector<double> w_double(static_cast<size_t>(c.Sq * c.Sk));
    for (int64_t i = 0; i < c.Sq; ++i)
      for (int64_t j = 0; j < c.Sk; ++j) w_double[i * c.Sk + j] = element(w.view(), i, j);
    out.poison();
    const attention::Status status = attention::static_attention(w.view(), x.view(), out.view());
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_TRUE(matches_reference(out.to_dense(), reference_static(w_double, c.Sq, c.Sk, x.view()),
                                  out.shape()));
    EXPECT_TRUE(out.outside_view_holds(std::numeric_limits<float>::quiet_NaN()));
  }
}

// W₁·W₂ with W₂ read through a transposed view (any strides).
TEST(StaticAttention, FactorizedMatchesReference) {
  const uint64_t seed = seed_for_current_test();
  for (const StaticCase& c : kCases) {
    SCOPED_TRACE(describe(c) + " " + seed_note(seed));
    std::mt19937_64 rng(seed);
    Tensor w1({c.Sq, c.R}), w2_t({c.Sk, c.R}), x({c.B, c.Sk, c.D}, c.layout),
        out({c.B, c.Sq, c.D}, c.layout);
    const float range = 2.0f / std::sqrt(static_cast<float>(c.R));
    w1.fill_uniform(rng, -range, range);
    w2_t.fill_uniform(rng, -range, range);
    x.fill_uniform(rng, -1.0f, 1.0f);
    TensorView w2 = w2_t.view();  // [R, Sk], column-major
    std::swap(w2.shape[0], w2.shape[1]);
    std::swap(w2.strides[0], w2.strides[1]);
    std::vector<double> w(static_cast<size_t>(c.Sq * c.Sk), 0.0);
    for (int64_t i = 0; i < c.Sq; ++i)
      for (int64_t j = 0; j < c.Sk; ++j)
        for (int64_t r = 0; r < c.R; ++r)
          w[i * c.Sk + j] += element(w1.view(), i, r) * element(w2, r, j);
    out.poison();
    const attention::Status status =
        attention::factorized_static_attention(w1.view(), w2, x.view(), out.view());
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_TRUE(
        matches_reference(out.to_dense(), reference_static(w, c.Sq, c.Sk, x.view()), out.shape()));
  }
}

TEST(StaticAttention, RejectsBadArguments) {
  Tensor w({4, 6}), w5({4, 5}), x({2, 5, 3}), out({2, 4, 3}), w2({3, 6});
  w.fill_storage(0.0f);
  w5.fill_storage(0.0f);
  x.fill_storage(1.0f);
  w2.fill_storage(0.0f);
  out.poison();
  auto expect_error = [&](const attention::Status& status, const std::string& name) {
    ASSERT_FALSE(status.ok()) << name;
    EXPECT_NE(status.message().find(name), std::string::npos) << status.message();
    for (float value : out.to_dense()) EXPECT_TRUE(std::isnan(value)) << name;
  };
  expect_error(attention::static_attention(w.view(), x.view(), out.view()), "values");  // Sk 5 != 6
  expect_error(attention::factorized_static_attention(w.view(), w2.view(), x.view(), out.view()),
               "w2");  // R: 6 != 3
  // out [2, 4, 3] overlapping the values it reads.
  TensorView aliased = x.view();
  aliased.shape = {2, 4, 3, 0};
  expect_error(attention::static_attention(w5.view(), x.view(), aliased), "out");
  expect_error(attention::static_attention(w5.view(), x.view(), x.view()), "out");  // [2, 5, 3]
}

}  // namespace
}  // namespace attention_test
