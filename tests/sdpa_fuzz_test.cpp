// Differential fuzzing against the naive reference: random shapes (1, primes up to 300), random
// placements (outer dimensions permuted, padded, reversed through negative strides), GQA ratios,
// scales, and value ranges including logits beyond ±1e4 (kept exact so fp32 rounding of q·k does
// not decide the comparison). Default: 5000 cases per run in kShards shards; ATTENTION_FUZZ_CASES=N
// runs N (the long mode), and ATTENTION_TEST_SEED reproduces a run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

#include "random_cases.h"
#include "test_util.h"

namespace attention_test {
namespace {

constexpr int kShards = 10;
constexpr int kDefaultCases = 5000;
// Smaller problems than the sweep's: many more of them.
constexpr int64_t kMaxWork = 1'500'000;

int cases_per_shard() {
  const int total = random_case_count("ATTENTION_FUZZ_CASES", kDefaultCases);
  return (total + kShards - 1) / kShards;
}

enum class Values { kUnit, kTiny, kExactLarge };

std::string describe(const StridePlan& plan) {
  std::ostringstream text;
  text << "order";
  for (int dim : plan.order) text << ' ' << dim;
  text << " pad";
  for (int64_t pad : plan.padding) text << ' ' << pad;
  if (!plan.reversed.empty()) {
    text << " reversed";
    for (int dim : plan.reversed) text << ' ' << dim;
  }
  return text.str();
}

// Integers in [-9, 9] make every q·k exact in fp32 (|q·k| <= 81·130 < 2^24), and a power-of-two
// scale keeps the logits exact: up to ±10530 at D = 130 and scale 1.
float exact_scale(std::mt19937_64& rng) {
  const float scales[] = {1.0f, 2.0f, 0.5f, -1.0f, -0.25f};
  return scales[uniform(rng, 0, 4)];
}

void fill_inputs(Values values, std::mt19937_64& rng, Tensor& q, Tensor& k, Tensor& v) {
  switch (values) {
    case Values::kUnit:
      for (Tensor* t : {&q, &k}) t->fill_uniform(rng, -1.0f, 1.0f);
      v.fill_values(rng);
      return;
    case Values::kTiny:
      for (Tensor* t : {&q, &k}) t->fill_uniform(rng, -1e-3f, 1e-3f);
      v.fill_values(rng, 1e-3f);
      return;
    case Values::kExactLarge: {
      // Half of the query rows copy a key of their kv head, so their top logit is |k_j|²·scale:
      // up to 81·D, beyond 1e4 for D >= 124.
      std::uniform_int_distribution<int> small_int(-9, 9);
      k.fill([&](const Index&) { return float(small_int(rng)); });
      const std::vector<float> keys = k.to_dense();
      const std::vector<int64_t>& qs = q.shape();
      const std::vector<int64_t>& ks = k.shape();
      const int64_t group = qs[1] / ks[1];
      std::vector<int64_t> copied_key(qs[0] * qs[1] * qs[2]);
      for (int64_t& key : copied_key) key = chance(rng, 0.5) ? uniform(rng, 0, ks[2] - 1) : -1;
      q.fill([&](const Index& at) {
        const int64_t key = copied_key[(at[0] * qs[1] + at[1]) * qs[2] + at[2]];
        if (key < 0) return float(small_int(rng));
        return keys[((at[0] * ks[1] + at[1] / group) * ks[2] + key) * ks[3] + at[3]];
      });
      v.fill_values(rng);
      return;
    }
  }
}

class SdpaFuzz : public ::testing::TestWithParam<int> {};

TEST_P(SdpaFuzz, RandomPlacementsAndValuesMatchReference) {
  std::mt19937_64 rng(seed_for_current_test());
  const int cases = cases_per_shard();
  for (int n = 0; n < cases && !HasFailure(); ++n) {
    SdpaCase c = draw_case(rng, kMaxWork);
    const auto values = static_cast<Values>(uniform(rng, 0, 2));
    if (values == Values::kExactLarge) c.scale = exact_scale(rng);
    StridePlan q_plan = draw_stride_plan(rng, 4), k_plan = draw_stride_plan(rng, 4),
               v_plan = draw_stride_plan(rng, 4), out_plan = draw_stride_plan(rng, 4),
               lse_plan = draw_stride_plan(rng, 3);
    // The GPU backends refuse negative strides (GpuErrors.ReversedViewsAreRefused): same draws,
    // forward walks.
    if (test_backend() != attention::Backend::Auto) {
      for (StridePlan* plan : {&q_plan, &k_plan, &v_plan, &out_plan, &lse_plan}) {
        plan->reversed.clear();
      }
    }
    const uint64_t seed = rng();
    SCOPED_TRACE(describe(c) + ", values " + std::to_string(int(values)) + ", q " +
                 describe(q_plan) + ", k " + describe(k_plan) + ", v " + describe(v_plan) +
                 ", out " + describe(out_plan) + ", lse " + describe(lse_plan) + ", case " +
                 std::to_string(n) + ", " + seed_note(seed));
    Tensor q({c.B, c.H, c.Sq, c.D}, q_plan), k({c.B, c.Hkv, c.Sk, c.D}, k_plan),
        v({c.B, c.Hkv, c.Sk, c.Dv}, v_plan), out({c.B, c.H, c.Sq, c.Dv}, out_plan),
        lse({c.B, c.H, c.Sq}, lse_plan);
    std::mt19937_64 fill_rng(seed);
    fill_inputs(values, fill_rng, q, k, v);
    run_and_compare(c, q.view(), k.view(), v.view(), out, lse);
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, SdpaFuzz, ::testing::Range(0, kShards));

}  // namespace
}  // namespace attention_test
