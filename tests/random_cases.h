// Random problem draws shared by the sweep and the differential fuzz test.
#pragma once

#include <cstdint>
#include <random>

#include "test_util.h"

namespace attention_test {

int64_t uniform(std::mt19937_64& rng, int64_t low, int64_t high);
bool chance(std::mt19937_64& rng, double probability);

// A random SDPA problem (named layouts, optional scale and logsumexp) whose naive reference does at
// most `max_work` multiply-adds (B·H·Sq·Sk·(D+Dv)). Sizes lean towards 1, primes, and D in {64,
// 128}.
SdpaCase draw_case(std::mt19937_64& rng, int64_t max_work);

// A random placement for a rank-4 operand (innermost dimension fixed, as the API requires) or a
// rank-3 logsumexp (S innermost): outer dimensions permuted, padded, and sometimes reversed.
StridePlan draw_stride_plan(std::mt19937_64& rng, size_t rank);

}  // namespace attention_test
