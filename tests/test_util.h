// Shared helpers of the attention tests: strided test tensors, printed seeds, DESIGN.md's fp32
// comparison rule, and the run-and-compare step of every scaled_dot_product_attention case.
#pragma once

#include <HalideRuntime.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "reference/half_reference.h"

namespace attention_test {

// Restores the default thread count (attention::set_num_threads(0)) however a test ends.
struct DefaultThreadsOnExit {
  ~DefaultThreadsOnExit() { attention::set_num_threads(0); }
};

// While it lives, Halide's dispatch picks the kernels' AVX2 variant, as on an AVX2-only CPU. The
// wrappers keep their first choice for the process, so skip_reason() is non-empty (skip the test)
// where this is no x86 CPU with AVX2+FMA or the AVX-512 variant has already run in this process
// (run the test alone, as ctest does).
class Avx2VariantScope {
 public:
  Avx2VariantScope();
  ~Avx2VariantScope();
  Avx2VariantScope(const Avx2VariantScope&) = delete;
  Avx2VariantScope& operator=(const Avx2VariantScope&) = delete;
  const std::string& skip_reason() const { return skip_reason_; }

 private:
  halide_can_use_target_features_t previous_ = nullptr;
  bool installed_ = false;
  std::string skip_reason_;
};

// Memory layouts behind the same logical [B, H, S, D] view (rank-3 tensors such as logsumexp get
// the analogous layout of [B, H, S] with S innermost).
enum class Layout {
  kDense,   // row-major [B, H, S, D]
  kPadded,  // row-major with unused elements after every row, head and batch
  kBSHD,    // memory order [B, S, H, D]: heads interleaved per position, as a fused QKV projection
            // writes
  kSHBD,    // memory order [S, H, B, D] with padded rows: batch and heads inside the sequence
};
constexpr std::array<Layout, 4> kAllLayouts = {Layout::kDense, Layout::kPadded, Layout::kBSHD,
                                               Layout::kSHBD};
const char* layout_name(Layout layout);

using Index = std::array<int64_t, attention::kMaxRank>;

// Any placement of a tensor in memory: which dimension is where, gaps, and walking direction.
struct StridePlan {
  std::vector<int> order;        // dimensions, outermost in memory first
  std::vector<int64_t> padding;  // unused elements after each run at a level (0 = innermost)
  std::vector<int> reversed;     // dimensions walked backwards (negative strides)
};
StridePlan stride_plan(Layout layout, size_t rank);

// An fp32 tensor owning its storage and handing out a strided TensorView of it.
class Tensor {
 public:
  // Storage for `shape` (rank 3 or 4) in `layout`, filled with quiet NaN. A zero extent still gets
  // one slice of storage (data is never null, and a kernel that writes anyway is caught); a
  // trailing guard keeps views that a test widens (e.g. innermost stride 2) inside the allocation.
  explicit Tensor(std::vector<int64_t> shape, Layout layout = Layout::kDense);
  Tensor(std::vector<int64_t> shape, const StridePlan& plan);

  attention::TensorView view();
  const std::vector<int64_t>& shape() const { return shape_; }
  std::vector<float>& storage() { return storage_; }
  const std::vector<float>& storage() const { return storage_; }

  // Sets every element of the view, visited in row-major order (so a seed reproduces the values).
  void fill(const std::function<float(const Index&)>& value_at);
  void fill_uniform(std::mt19937_64& rng, float low, float high);
  // Values (v) of both signs with a positive mean, uniform in [-a/2, 3a/2]. Every output is a
  // weighted mean of v, so zero-mean values let a row averaging many keys into few features cancel
  // to ~1e-7·a, where the relative L2 rule measures fp32 summation noise instead of the kernel (a
  // fuzz case with Sq = Dv = 1 failed so at an absolute error of 6e-12, and a Nadaraya–Watson row
  // averaging all 100 keys at 2e-9). A lost or doubled key still moves an output by ~a/Sk.
  void fill_values(std::mt19937_64& rng, float a = 1.0f);
  // Sets the whole backing storage, padding and guard included.
  void fill_storage(float value);
  void poison();  // fill_storage(quiet NaN)

  // The view's elements as a dense row-major vector.
  std::vector<float> to_dense() const;
  // Success if every storage element outside the view still holds `value` bit for bit.
  ::testing::AssertionResult outside_view_holds(float value) const;

 private:
  void for_each_element(const std::function<void(const Index&, int64_t offset)>& visit) const;

  std::vector<int64_t> shape_;
  Index strides_{};
  int64_t base_ = 0;  // offset of element [0, ..., 0] (non-zero when a dimension is reversed)
  std::vector<float> storage_;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b);

// A rank-3 view [B, S, X] as the rank-4 [B, 1, S, X] (one head) the SDPA reference reads.
attention::TensorView with_one_head(const attention::TensorView& t);

// The backend the SDPA tests run on: ATTENTION_TEST_BACKEND = cpu (the default, Backend::Auto),
// opencl or cuda. CTest registers the SDPA suites once more for each GPU backend
// (tests/CMakeLists).
attention::Backend test_backend();
// Skips the current test (with the reason) when test_backend() cannot run here; true if skipped.
bool skip_unless_backend_available();

// The least workspace limit a GPU call on `backend` accepts: one query tile of `head_unit` heads
// (SDPA's GQA group, MHA's H) at the tiling of the kernel that serves it (Sk >= 1).
int64_t smallest_gpu_workspace(attention::Backend backend, int64_t head_unit, int64_t Sq,
                               int64_t Sk, int64_t Dv, bool masked, bool mha = false);

// The GpuOptions of a test call on test_backend(): on a GPU backend, every other call gets the
// smallest workspace limit it accepts (one query tile of `head_unit` heads: SDPA's GQA group, MHA's
// H), so the suites run calls in chunks of rows, batches and heads beside whole calls. CPU: {}.
attention::GpuOptions test_gpu_options(int64_t head_unit, int64_t Sq, int64_t Sk, int64_t Dv,
                                       bool masked, bool mha = false);

// ATTENTION_TEST_SEED if set, else a fresh std::random_device value; printed on first use.
uint64_t base_seed();
// The base seed mixed with the running test's full name: distinct per test, reproducible by name.
uint64_t seed_for_current_test();
// "seed S (rerun with ATTENTION_TEST_SEED=B)", for SCOPED_TRACE.
std::string seed_note(uint64_t seed);
// How many random cases a test runs: the environment variable `variable` if set (at least 1), else
// `fallback` (long modes, docs/testing.md, "Reliability").
int random_case_count(const char* variable, int fallback);

// The x86 or ARM targets this build made its kernels for, best first (ATTENTION_TARGET_LIST,
// from CMake).
std::vector<std::string> built_kernel_targets();

// Packed documents for the document-mask mod: B rows of S token ids ([B, S] row-major), each row
// runs of one id (0, 1, ...) of lengths drawn from [1, max_length].
std::vector<int32_t> random_document_ids(int64_t B, int64_t S, int max_length,
                                         std::mt19937_64& rng);

// DESIGN.md's fp32 rule: max abs error <= 2e-5 * max(1, max|ref|) and relative L2 error <= 1e-5.
// A NaN output where the reference is finite fails; infinite reference values must match exactly.
// `shape` only names the worst element in the message. Log-domain values (logsumexp) take the
// absolute bound alone: their error is absolute by nature (an error d in a row's logsumexp scales
// its weights exp(s - lse) by exp(-d)), and a relative error means nothing where lse is near 0 (a
// near-cancellation of O(1) terms, e.g. 0.0013 = max + log(sum) with max ~ 2).
enum class Domain { Linear, Log };
::testing::AssertionResult matches_reference(const std::vector<float>& actual,
                                             const std::vector<double>& expected,
                                             const std::vector<int64_t>& shape,
                                             Domain domain = Domain::Linear);

// The conversion kernels (attention::convert_dtype's) against the reference conversions: every
// half value widened; special, boundary and random values rounded (half_precision_test.cpp).
void expect_conversions_match_reference(uint64_t seed);

// The storage type the SDPA suites run in: ATTENTION_TEST_DTYPE = f32 (the default), f16 or bf16
// (q, k, v, out and the additive mask in that type). CTest registers the SDPA suites once more for
// each half type (tests/CMakeLists).
attention::DType test_dtype();

// A copy of an fp32 view (any strides) in a half type, at the same strides: every element of the
// view's memory span converted, padding included.
class HalfCopy {
 public:
  HalfCopy(const attention::TensorView& source, attention::DType dtype);
  attention::TensorView view();     // the half tensor
  attention::TensorView rounded();  // the rounded values as fp32, at the source's strides
  // Copies the half span back into the source's memory: an element still holding the bits of the
  // half NaN a poisoned (quiet NaN) source converted to becomes that quiet NaN again, bit for bit,
  // so the source's outside_view_holds still sees any write outside the view.
  void write_back();

 private:
  attention::TensorView source_;
  attention::DType dtype_;
  int64_t lo_ = 0;  // the span's first element, relative to source_.data
  std::vector<uint16_t> bits_;
  std::vector<float> rounded_;
};

// The accuracy rule for a half-precision output (FlashAttention's): max |actual - expected| is at
// most 2x the error of `expected` rounded to `dtype` (the naive loops' storage rounding) plus an
// absolute floor of 1e-5 · max(1, max|expected|), and (DESIGN.md's) relative L2 error <= 1e-2; a
// zero reference (a fully masked row) must come out as exact zero; non-finite values as in
// matches_reference.
// `naive`: the naive loops' output before its final rounding, where the kernel's algorithm stores
// an intermediate in the half type too (the native bf16 prefill's softmax weights, see
// native_bf16_weights); by default the naive loops are `expected` itself.
::testing::AssertionResult matches_half_reference(const std::vector<float>& actual,
                                                  const std::vector<double>& expected,
                                                  const std::vector<int64_t>& shape,
                                                  attention::DType dtype,
                                                  const std::vector<double>* naive = nullptr);

// Whether `kernel` (a kernel name) is one of the native bf16 prefill kernels: vdpbf16ps
// (sdpa_bf16_prefill) or AMX (sdpa_bf16_amx_prefill). Both round the softmax weights to bfloat16.
bool is_native_bf16_prefill(const std::string& kernel);

// The kernel explain_sdpa names first for a CPU call of these sizes (Hkv = H, dense rows, q and
// out of `q_out`, k and v of `kv`; `masked`: with a softcap, which the masked kernels compute), ""
// where the plan names none.
std::string planned_kernel(int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D,
                           bool masked = false, attention::DType kv = attention::DType::Float32,
                           attention::DType q_out = attention::DType::Float32);

// The softmax weights' storage type of the CPU kernel that serves an SDPA call with these
// half-precision views (all `dtype`) and mask: BFloat16 where a native bf16 prefill runs it
// (FlashAttention's P: weights rounded for P·V, whose naive loops reference_sdpa's
// weights_storage gives; unmasked calls, and on AMX lone causal masks too), Float32 otherwise.
attention::DType native_bf16_weights(const attention::TensorView& q, const attention::TensorView& k,
                                     const attention::TensorView& v, attention::DType dtype,
                                     const attention::MaskOptions& mask);

// One scaled_dot_product_attention problem.
struct SdpaCase {
  int64_t B = 1, H = 1, Hkv = 1, Sq = 1, Sk = 1, D = 1, Dv = 1;
  Layout q_layout = Layout::kDense, k_layout = Layout::kDense, v_layout = Layout::kDense;
  Layout out_layout = Layout::kDense;  // also the layout of logsumexp
  std::optional<float> scale;          // unset: the library's default 1/sqrt(D)
  bool logsumexp = false;

  SdpaCase& layout(Layout all);  // q, k, v and out
  SdpaCase& layouts(Layout q, Layout k, Layout v, Layout out);
  SdpaCase& with_scale(float value);
  SdpaCase& with_logsumexp();
  double effective_scale() const;
};
SdpaCase sdpa_case(int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D,
                   int64_t Dv);
std::string describe(const SdpaCase& c);
std::string identifier(const SdpaCase& c);  // usable as a gtest parameter name
void PrintTo(const SdpaCase& c, std::ostream* os);

// The tensors of a case, shaped and laid out as it says: inputs still NaN, or with input_seed, q, k
// and v uniform in [-1, 1] drawn from std::mt19937_64(input_seed).
struct SdpaTensors {
  explicit SdpaTensors(const SdpaCase& c);
  SdpaTensors(const SdpaCase& c, uint64_t input_seed);
  Tensor q, k, v, out, lse;
};

// The masks of a test, as a recipe: MaskTensors turns it into tensors and attention::MaskOptions.
struct MaskSpec {
  attention::Causal causal = attention::Causal::None;
  int64_t window = -1, window_forward = 0;
  bool key_lengths = false, query_lengths = false;  // random lengths in [0, S]
  bool full_lengths = false;   // the lengths given are all Sk / Sq instead (they hide nothing)
  bool bool_mask = false;      // random, ~25% hidden
  bool additive_mask = false;  // random in [-2, 2], ~25% hidden_value
  bool mask_batch_broadcast = false, mask_head_broadcast = false;  // size-1 B / H dims
  float hidden_value = -INFINITY;  // what additive_mask hides with (-inf or e.g. -FLT_MAX)
  bool alibi = false, custom_slopes = false;
  float softcap = 0.0f;
};
std::string describe(const MaskSpec& m);

// Owns the tensors a MaskSpec needs for one case, drawn from `seed`.
struct MaskTensors {
  MaskTensors(const MaskSpec& spec, const SdpaCase& c, uint64_t seed);
  attention::MaskOptions options;
  std::vector<int32_t> key_lengths, query_lengths;
  std::vector<uint8_t> bool_mask;
  std::vector<float> additive_mask, slopes;
};

// Poisons out (and logsumexp if the case asks for it), runs the library, and expects success,
// results matching reference_sdpa, and nothing written outside the output views.
void run_and_compare(const SdpaCase& c, const attention::TensorView& q,
                     const attention::TensorView& k, const attention::TensorView& v, Tensor& out,
                     Tensor& lse, const attention::MaskOptions& mask = {});
// The whole step on fresh random inputs drawn from `seed`, traced with the case and the seed.
void expect_sdpa_matches_reference(const SdpaCase& c, uint64_t seed);
// The same with masks built from `spec` (also drawn from `seed`).
void expect_masked_sdpa_matches_reference(const SdpaCase& c, const MaskSpec& spec, uint64_t seed);

}  // namespace attention_test
