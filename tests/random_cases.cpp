#include "random_cases.h"

#include <algorithm>
#include <numeric>

namespace attention_test {
namespace {

bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t divisor = 2; divisor * divisor <= n; ++divisor) {
    if (n % divisor == 0) return false;
  }
  return true;
}

// A prime in [2, high], drawn by rejection.
int64_t prime_up_to(std::mt19937_64& rng, int64_t high) {
  for (;;) {
    const int64_t candidate = uniform(rng, 2, high);
    if (is_prime(candidate)) return candidate;
  }
}

// Sq leans towards 1 and 2 (decode) and primes (ragged tiles).
int64_t draw_query_length(std::mt19937_64& rng) {
  if (chance(rng, 0.25)) return uniform(rng, 1, 2);
  if (chance(rng, 0.3)) return prime_up_to(rng, 150);
  return uniform(rng, 1, 150);
}

// D leans towards the head dims the kernels specialize (64, 128); the rest covers every vector
// tail.
int64_t draw_head_dim(std::mt19937_64& rng) {
  if (chance(rng, 0.25)) return chance(rng, 0.5) ? 64 : 128;
  return uniform(rng, 1, 130);
}

Layout draw_layout(std::mt19937_64& rng) {
  return kAllLayouts[static_cast<size_t>(uniform(rng, 0, kAllLayouts.size() - 1))];
}

}  // namespace

int64_t uniform(std::mt19937_64& rng, int64_t low, int64_t high) {
  return std::uniform_int_distribution<int64_t>(low, high)(rng);
}

bool chance(std::mt19937_64& rng, double probability) {
  return std::bernoulli_distribution(probability)(rng);
}

// Draws are sequenced one per statement: argument evaluation order would make the cases
// compiler-dependent.
SdpaCase draw_case(std::mt19937_64& rng, int64_t max_work) {
  for (;;) {
    SdpaCase c;
    c.B = uniform(rng, 1, 3);
    c.Hkv = uniform(rng, 1, 4);
    c.H = c.Hkv * uniform(rng, 1, 4);
    c.Sq = draw_query_length(rng);
    c.Sk = chance(rng, 0.3) ? prime_up_to(rng, 300) : uniform(rng, 1, 300);
    c.D = draw_head_dim(rng);
    c.Dv = chance(rng, 0.3) ? c.D : draw_head_dim(rng);
    c.q_layout = draw_layout(rng);
    c.k_layout = draw_layout(rng);
    c.v_layout = draw_layout(rng);
    c.out_layout = draw_layout(rng);
    if (chance(rng, 0.5)) c.scale = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
    c.logsumexp = chance(rng, 0.5);
    if (c.B * c.H * c.Sq * c.Sk * (c.D + c.Dv) <= max_work) return c;
  }
}

StridePlan draw_stride_plan(std::mt19937_64& rng, size_t rank) {
  StridePlan plan;
  plan.order.resize(rank);
  std::iota(plan.order.begin(), plan.order.end(), 0);
  std::shuffle(plan.order.begin(), plan.order.end() - 1, rng);  // the innermost dim stays last
  for (size_t level = 0; level < rank; ++level) {
    plan.padding.push_back(chance(rng, 0.5) ? uniform(rng, 1, 9) : 0);
  }
  for (int dim = 0; dim + 1 < static_cast<int>(rank); ++dim) {
    if (chance(rng, 0.3)) plan.reversed.push_back(dim);
  }
  return plan;
}

}  // namespace attention_test
