// The AVX-512 tiling (3 query vectors × 8 keys for Q·Kᵀ, 6 rows × 4 vectors for P·V, one 16-query
// vector per decode tile, split-KV) only runs on AVX-512 CPUs. These kernels are compiled for AVX2
// with that tiling (generator parameter tiling_as), so any AVX2 machine executes and checks its
// block and tail logic against the reference. They are called directly, without the runtime's
// argument checks.
#include <HalideBuffer.h>
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <vector>

#include "reference/sdpa_reference.h"
#include "sdpa_f32_decode_avx512_tiles.h"
#include "sdpa_f32_prefill_avx512_tiles.h"
#include "test_util.h"

namespace attention_test {
namespace {

using HalideBuffer = Halide::Runtime::Buffer<float>;

// A view of the tensor's storage with Halide's dimension order (innermost first); `features` > 0:
// a leading stride-0 dimension of that extent (a CPU kernel's logsumexp output, RowStats).
HalideBuffer halide_view(const attention::TensorView& t, int features = 0) {
  std::vector<halide_dimension_t> dims(t.rank);
  for (int d = 0; d < t.rank; ++d) {
    dims[t.rank - 1 - d] =
        halide_dimension_t(0, static_cast<int32_t>(t.shape[d]), static_cast<int32_t>(t.strides[d]));
  }
  if (features > 0) dims.insert(dims.begin(), halide_dimension_t(0, features, 0));
  return HalideBuffer(static_cast<float*>(t.data), static_cast<int>(dims.size()), dims.data());
}

// key_split: keys per split (decode: per work item; prefill: per pass over a query tile).
void expect_kernel_matches_reference(const SdpaCase& c, bool prefill, uint64_t seed,
                                     int32_t key_split) {
  SCOPED_TRACE(describe(c) + (prefill ? ", prefill" : ", decode") + ", key_split " +
               std::to_string(key_split) + ", " + seed_note(seed));
  SdpaTensors tensors(c, seed);
  const float scale = static_cast<float>(c.effective_scale());
  HalideBuffer q = halide_view(tensors.q.view()), k = halide_view(tensors.k.view()),
               v = halide_view(tensors.v.view()), out = halide_view(tensors.out.view()),
               lse = halide_view(tensors.lse.view(), static_cast<int>(c.Dv));
  // No user_context: errors, if any, go to stderr and the return code.
  const int code = prefill
                       ? sdpa_f32_prefill_avx512_tiles(nullptr, q, k, v, scale, key_split, out, lse)
                       : sdpa_f32_decode_avx512_tiles(nullptr, q, k, v, scale, key_split, out, lse);
  ASSERT_EQ(code, 0);
  std::vector<double> expected_out, expected_lse;
  reference_sdpa(tensors.q.view(), tensors.k.view(), tensors.v.view(), c.effective_scale(),
                 &expected_out, &expected_lse);
  EXPECT_TRUE(matches_reference(tensors.out.to_dense(), expected_out, tensors.out.shape()));
  EXPECT_TRUE(
      matches_reference(tensors.lse.to_dense(), expected_lse, tensors.lse.shape(), Domain::Log));
  EXPECT_TRUE(tensors.out.outside_view_holds(std::nanf("")));
}

// Dv around the block (64) and vector (16) widths, where the decode kernel switches tail handling.
constexpr int64_t kValueDims[] = {1, 15, 16, 17, 59, 63, 64, 65, 80, 128};

TEST(Avx512Tiling, KernelsMatchReference) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    GTEST_SKIP() << "these test kernels are compiled for AVX2+FMA";
  }
  const uint64_t seed = seed_for_current_test();
  for (int64_t dv : kValueDims) {
    // Prefill: ragged 48-query tiles, 37 keys in one split or in splits of 16 (the last holds 5);
    // decode: 1 to 47 queries (a 16-query tile, ragged).
    for (int32_t key_split : {16, 40}) {
      expect_kernel_matches_reference(sdpa_case(1, 2, 2, 97, 37, 64, dv).with_logsumexp(), true,
                                      seed, key_split);
    }
    expect_kernel_matches_reference(sdpa_case(2, 4, 2, 48, 9, 59, dv).with_logsumexp(), true, seed,
                                    16);
    // 70 keys in one split, or in splits of 64 (the last holds 6 keys).
    for (int64_t queries : {1, 15, 17, 47}) {
      for (int32_t key_split : {64, 128}) {
        expect_kernel_matches_reference(sdpa_case(1, 2, 1, queries, 70, 128, dv).with_logsumexp(),
                                        false, seed, key_split);
      }
    }
  }
  expect_kernel_matches_reference(
      sdpa_case(1, 3, 3, 130, 131, 111, 80).layout(Layout::kPadded).with_logsumexp(), true, seed,
      48);
}

}  // namespace
}  // namespace attention_test
