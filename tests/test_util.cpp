#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>

#include "execute/amx_prefill.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_table.h"
#include "reference/sdpa_reference.h"

namespace attention_test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Trailing elements after every tensor's last element; covers views a test widens by up to 256.
constexpr int64_t kGuardElements = 256;

std::string format_index(size_t linear, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const auto extent = static_cast<size_t>(std::max<int64_t>(shape[d], 1));
    index[d] = static_cast<int64_t>(linear % extent);
    linear /= extent;
  }
  std::ostringstream text;
  text << '[';
  for (size_t d = 0; d < index.size(); ++d) text << (d ? "," : "") << index[d];
  text << ']';
  return text.str();
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

#if defined(__x86_64__)
namespace {
int without_avx512(int count, const uint64_t* features) {
  const int word = halide_target_feature_avx512 / 64;
  if (word < count && (features[word] >> (halide_target_feature_avx512 % 64)) & 1) return 0;
  return halide_default_can_use_target_features(count, features);
}
}  // namespace
#endif

Avx2VariantScope::Avx2VariantScope() {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    skip_reason_ = "this CPU has no AVX2+FMA";
    return;
  }
  previous_ = halide_set_custom_can_use_target_features(without_avx512);
  installed_ = true;
  if (attention::cpu_kernel_target().find("avx512") != std::string::npos)
    skip_reason_ = "the AVX-512 variant was already picked in this process; run this test alone";
#else
  skip_reason_ = "no x86 CPU";
#endif
}

Avx2VariantScope::~Avx2VariantScope() {
  if (installed_) halide_set_custom_can_use_target_features(previous_);
}

StridePlan stride_plan(Layout layout, size_t rank) {
  const bool rank4 = rank == 4;
  switch (layout) {
    case Layout::kDense:
      return rank4 ? StridePlan{{0, 1, 2, 3}, {0, 0, 0, 0}, {}}
                   : StridePlan{{0, 1, 2}, {0, 0, 0}, {}};
    case Layout::kPadded:
      return rank4 ? StridePlan{{0, 1, 2, 3}, {3, 5, 7, 2}, {}}
                   : StridePlan{{0, 1, 2}, {3, 5, 2}, {}};
    case Layout::kBSHD:  // rank 3 keeps S innermost, so batch and heads swap instead
      return rank4 ? StridePlan{{0, 2, 1, 3}, {0, 0, 0, 0}, {}}
                   : StridePlan{{1, 0, 2}, {0, 0, 0}, {}};
    case Layout::kSHBD:
      return rank4 ? StridePlan{{2, 1, 0, 3}, {1, 0, 0, 0}, {}}
                   : StridePlan{{1, 0, 2}, {1, 0, 0}, {}};
  }
  return {};
}

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kDense:
      return "dense";
    case Layout::kPadded:
      return "padded";
    case Layout::kBSHD:
      return "bshd";
    case Layout::kSHBD:
      return "shbd";
  }
  return "?";
}

Tensor::Tensor(std::vector<int64_t> shape, Layout layout)
    : Tensor(shape, stride_plan(layout, shape.size())) {}

Tensor::Tensor(std::vector<int64_t> shape, const StridePlan& plan) : shape_(std::move(shape)) {
  int64_t span = 1;
  for (size_t level = 0; level < shape_.size(); ++level) {
    const int dim = plan.order[shape_.size() - 1 - level];
    strides_[dim] = span;
    span = span * std::max<int64_t>(shape_[dim], 1) + plan.padding[level];
  }
  for (int dim : plan.reversed) {
    base_ += std::max<int64_t>(shape_[dim] - 1, 0) * strides_[dim];
    strides_[dim] = -strides_[dim];
  }
  storage_.assign(static_cast<size_t>(span + kGuardElements), kNaN);
}

attention::TensorView Tensor::view() {
  attention::TensorView view;
  view.data = storage_.data() + base_;
  view.rank = static_cast<int>(shape_.size());
  std::copy(shape_.begin(), shape_.end(), view.shape.begin());
  view.strides = strides_;
  return view;
}

void Tensor::for_each_element(const std::function<void(const Index&, int64_t)>& visit) const {
  if (std::find(shape_.begin(), shape_.end(), 0) != shape_.end()) return;
  const int rank = static_cast<int>(shape_.size());
  Index index{};
  for (;;) {
    int64_t offset = base_;
    for (int d = 0; d < rank; ++d) offset += index[d] * strides_[d];
    visit(index, offset);
    int d = rank - 1;
    while (d >= 0 && ++index[d] == shape_[d]) index[d--] = 0;
    if (d < 0) return;
  }
}

void Tensor::fill(const std::function<float(const Index&)>& value_at) {
  for_each_element([&](const Index& index, int64_t offset) { storage_[offset] = value_at(index); });
}

void Tensor::fill_uniform(std::mt19937_64& rng, float low, float high) {
  std::uniform_real_distribution<float> distribution(low, high);
  fill([&](const Index&) { return distribution(rng); });
}

void Tensor::fill_values(std::mt19937_64& rng, float a) { fill_uniform(rng, -0.5f * a, 1.5f * a); }

void Tensor::fill_storage(float value) { std::fill(storage_.begin(), storage_.end(), value); }

void Tensor::poison() { fill_storage(kNaN); }

std::vector<float> Tensor::to_dense() const {
  std::vector<float> dense;
  for_each_element([&](const Index&, int64_t offset) { dense.push_back(storage_[offset]); });
  return dense;
}

::testing::AssertionResult Tensor::outside_view_holds(float value) const {
  std::vector<bool> in_view(storage_.size(), false);
  for_each_element([&](const Index&, int64_t offset) { in_view[offset] = true; });
  int64_t changed = 0, first_changed = -1;
  for (size_t i = 0; i < storage_.size(); ++i) {
    if (in_view[i] || std::memcmp(&storage_[i], &value, sizeof(float)) == 0) continue;
    if (changed++ == 0) first_changed = static_cast<int64_t>(i);
  }
  if (changed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << changed << " storage elements outside the view were written, "
         << "the first at offset " << first_changed << " (now " << storage_[first_changed] << ")";
}

attention::TensorView with_one_head(const attention::TensorView& t) {
  attention::TensorView view = t;
  view.rank = 4;
  for (int d = 3; d >= 2; --d) {
    view.shape[d] = t.shape[d - 1];
    view.strides[d] = t.strides[d - 1];
  }
  view.shape[1] = 1;
  view.strides[1] = 0;
  return view;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

uint64_t base_seed() {
  static const uint64_t seed = [] {
    const char* from_env = std::getenv("ATTENTION_TEST_SEED");
    std::random_device device;
    const uint64_t chosen = (from_env != nullptr && *from_env != '\0')
                                ? std::strtoull(from_env, nullptr, 0)
                                : (static_cast<uint64_t>(device()) << 32) ^ device();
    std::printf("[   SEED   ] ATTENTION_TEST_SEED=%llu\n", static_cast<unsigned long long>(chosen));
    return chosen;
  }();
  return seed;
}

int random_case_count(const char* variable, int fallback) {
  const char* from_env = std::getenv(variable);
  return from_env != nullptr ? static_cast<int>(std::max(std::strtol(from_env, nullptr, 10), 1L))
                             : fallback;
}

uint64_t seed_for_current_test() {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string(test->test_suite_name()) + "." + test->name();
  uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a: stable across compilers, unlike std::hash
  for (unsigned char c : name) hash = (hash ^ c) * 0x100000001b3ULL;
  return splitmix64(base_seed() ^ hash);
}

std::string seed_note(uint64_t seed) {
  return "seed " + std::to_string(seed) +
         " (rerun with ATTENTION_TEST_SEED=" + std::to_string(base_seed()) + ")";
}

std::vector<std::string> built_kernel_targets() {
  std::vector<std::string> targets;
  std::istringstream list(ATTENTION_TARGET_LIST);
  for (std::string target; std::getline(list, target, ',');) {
    if (!target.empty()) targets.push_back(target);
  }
  return targets;
}

std::vector<int32_t> random_document_ids(int64_t B, int64_t S, int max_length,
                                         std::mt19937_64& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(B * S));
  std::uniform_int_distribution<int> length(1, max_length);
  for (int64_t b = 0; b < B; ++b) {
    int32_t doc = 0;
    for (int64_t j = 0; j < S; ++doc) {
      for (int n = length(rng); n > 0 && j < S; --n, ++j) ids[b * S + j] = doc;
    }
  }
  return ids;
}

::testing::AssertionResult matches_reference(const std::vector<float>& actual,
                                             const std::vector<double>& expected,
                                             const std::vector<int64_t>& shape, Domain domain) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << actual.size() << " elements, reference has " << expected.size();
  }
  double max_abs_reference = 0.0, max_error = 0.0, error_squares = 0.0, reference_squares = 0.0;
  size_t worst = 0, first_nonfinite = 0;
  int64_t nan_outputs = 0, nonfinite_mismatches = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double got = actual[i], want = expected[i];
    const bool finite_want = std::isfinite(want), finite_got = std::isfinite(got);
    if (!finite_want || !finite_got) {
      // A non-finite reference must be reproduced exactly; a non-finite output needs such a
      // reference.
      const bool same = std::isnan(want) ? std::isnan(got) : got == want;
      if (same) continue;
      if (nan_outputs + nonfinite_mismatches == 0) first_nonfinite = i;
      if (std::isnan(got) && finite_want) {
        ++nan_outputs;
      } else {
        ++nonfinite_mismatches;
      }
      continue;
    }
    const double error = std::abs(got - want);
    max_abs_reference = std::max(max_abs_reference, std::abs(want));
    if (error > max_error) max_error = error, worst = i;
    error_squares += error * error;
    reference_squares += want * want;
  }
  const double abs_limit = 2e-5 * std::max(1.0, max_abs_reference), relative_limit = 1e-5;
  const double relative = reference_squares > 0.0 ? std::sqrt(error_squares / reference_squares)
                          : error_squares > 0.0   ? std::numeric_limits<double>::infinity()
                                                  : 0.0;
  const bool ok = nan_outputs == 0 && nonfinite_mismatches == 0 && max_error <= abs_limit &&
                  (domain == Domain::Log || relative <= relative_limit);
  ::testing::AssertionResult result =
      ok ? ::testing::AssertionSuccess() : ::testing::AssertionFailure();
  result << std::setprecision(9) << "max abs error " << max_error << " (limit " << abs_limit << ")";
  if (!actual.empty()) {
    result << " at " << format_index(worst, shape) << ": got " << actual[worst] << ", reference "
           << expected[worst];
  }
  result << "; relative L2 error " << relative << " (limit " << relative_limit << "); "
         << nan_outputs << " NaN where the reference is finite, " << nonfinite_mismatches
         << " other non-finite mismatches";
  if (nan_outputs + nonfinite_mismatches > 0) {
    result << ", the first at " << format_index(first_nonfinite, shape) << ": got "
           << actual[first_nonfinite] << ", reference " << expected[first_nonfinite];
  }
  return result;
}

attention::DType test_dtype() {
  const char* name = std::getenv("ATTENTION_TEST_DTYPE");
  if (name == nullptr || std::string(name) == "f32") return attention::DType::Float32;
  if (std::string(name) == "f16") return attention::DType::Float16;
  if (std::string(name) == "bf16") return attention::DType::BFloat16;
  ADD_FAILURE() << "ATTENTION_TEST_DTYPE=" << name << ": expected f32, f16 or bf16";
  return attention::DType::Float32;
}

HalfCopy::HalfCopy(const attention::TensorView& source, attention::DType dtype)
    : source_(source), dtype_(dtype) {
  int64_t hi = 0;
  for (int d = 0; d < source.rank; ++d) {
    const int64_t reach = (source.shape[d] - 1) * source.strides[d];
    (reach < 0 ? lo_ : hi) += source.shape[d] > 0 ? reach : 0;
  }
  const auto size = static_cast<size_t>(source.numel() > 0 ? hi - lo_ + 1 : 1);
  bits_.resize(size);
  rounded_.resize(size);
  const auto* from = static_cast<const float*>(source.data) + lo_;
  for (size_t i = 0; i < size && source.numel() > 0; ++i) {
    bits_[i] = to_half_bits(from[i], dtype);
    rounded_[i] = from_half_bits(bits_[i], dtype);
  }
}

attention::TensorView HalfCopy::view() {
  attention::TensorView t = source_;
  t.data = bits_.data() - lo_;
  t.dtype = dtype_;
  return t;
}

attention::TensorView HalfCopy::rounded() {
  attention::TensorView t = source_;
  t.data = rounded_.data() - lo_;
  return t;
}

void HalfCopy::write_back() {
  if (source_.numel() == 0) return;
  const uint16_t poison = to_half_bits(kNaN, dtype_);
  auto* to = static_cast<float*>(source_.data) + lo_;
  for (size_t i = 0; i < bits_.size(); ++i) {
    to[i] = bits_[i] == poison ? kNaN : from_half_bits(bits_[i], dtype_);
  }
}

::testing::AssertionResult matches_half_reference(const std::vector<float>& actual,
                                                  const std::vector<double>& expected,
                                                  const std::vector<int64_t>& shape,
                                                  attention::DType dtype,
                                                  const std::vector<double>* naive) {
  if (actual.size() != expected.size() || (naive != nullptr && naive->size() != expected.size())) {
    return ::testing::AssertionFailure()
           << actual.size() << " elements, reference has " << expected.size();
  }
  double max_abs_reference = 0.0, max_error = 0.0, rounding_error = 0.0;
  double error_squares = 0.0, reference_squares = 0.0;
  size_t worst = 0, first_bad = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double got = actual[i], want = expected[i];
    // Non-finite values must match exactly (as in matches_reference); a zero reference (a fully
    // masked row) must be an exact zero.
    const bool exact = !std::isfinite(want) || !std::isfinite(got) || want == 0.0;
    if (exact) {
      const bool same = std::isnan(want) ? std::isnan(got) : got == want;
      if (!same && bad++ == 0) first_bad = i;
      continue;
    }
    max_abs_reference = std::max(max_abs_reference, std::abs(want));
    const double naive_out = naive != nullptr ? (*naive)[i] : want;
    rounding_error =
        std::max(rounding_error, std::abs(round_to(dtype, static_cast<float>(naive_out)) - want));
    const double error = std::abs(got - want);
    if (error > max_error) max_error = error, worst = i;
    error_squares += error * error;
    reference_squares += want * want;
  }
  const double limit = 2.0 * rounding_error + 1e-5 * std::max(1.0, max_abs_reference);
  // DESIGN.md's rule for half storage too: relative L2 error <= 1e-2.
  const double relative =
      reference_squares > 0.0 ? std::sqrt(error_squares / reference_squares) : 0.0;
  const bool ok = bad == 0 && max_error <= limit && relative <= 1e-2;
  ::testing::AssertionResult result =
      ok ? ::testing::AssertionSuccess() : ::testing::AssertionFailure();
  result << std::setprecision(9) << "max abs error " << max_error << " (limit " << limit
         << " = 2 x rounding error " << rounding_error << " + floor), relative L2 error "
         << relative << " (limit 0.01)";
  if (!actual.empty()) {
    result << " at " << format_index(worst, shape) << ": got " << actual[worst] << ", reference "
           << expected[worst];
  }
  result << "; " << bad << " non-finite or zero-reference mismatches";
  if (bad > 0) {
    result << ", the first at " << format_index(first_bad, shape) << ": got " << actual[first_bad]
           << ", reference " << expected[first_bad];
  }
  return result;
}

SdpaCase& SdpaCase::layout(Layout all) { return layouts(all, all, all, all); }

SdpaCase& SdpaCase::layouts(Layout q, Layout k, Layout v, Layout out) {
  q_layout = q, k_layout = k, v_layout = v, out_layout = out;
  return *this;
}

SdpaCase& SdpaCase::with_scale(float value) {
  scale = value;
  return *this;
}

SdpaCase& SdpaCase::with_logsumexp() {
  logsumexp = true;
  return *this;
}

double SdpaCase::effective_scale() const {
  return scale ? static_cast<double>(*scale) : 1.0 / std::sqrt(static_cast<double>(D));
}

SdpaCase sdpa_case(int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D,
                   int64_t Dv) {
  SdpaCase c;
  c.B = B, c.H = H, c.Hkv = Hkv, c.Sq = Sq, c.Sk = Sk, c.D = D, c.Dv = Dv;
  return c;
}

std::string describe(const SdpaCase& c) {
  std::ostringstream text;
  text << "B=" << c.B << " H=" << c.H << " Hkv=" << c.Hkv << " Sq=" << c.Sq << " Sk=" << c.Sk
       << " D=" << c.D << " Dv=" << c.Dv << " layouts q=" << layout_name(c.q_layout)
       << " k=" << layout_name(c.k_layout) << " v=" << layout_name(c.v_layout)
       << " out=" << layout_name(c.out_layout) << " scale=";
  if (c.scale)
    text << std::setprecision(9) << *c.scale;
  else
    text << "default";
  text << " logsumexp=" << (c.logsumexp ? "on" : "off");
  return text.str();
}

std::string identifier(const SdpaCase& c) {
  std::ostringstream text;
  text << "B" << c.B << "_H" << c.H << "_Hkv" << c.Hkv << "_Sq" << c.Sq << "_Sk" << c.Sk << "_D"
       << c.D << "_Dv" << c.Dv;
  const bool one_layout =
      c.q_layout == c.out_layout && c.k_layout == c.out_layout && c.v_layout == c.out_layout;
  if (one_layout) {
    text << "_" << layout_name(c.out_layout);
  } else {
    text << "_q_" << layout_name(c.q_layout) << "_k_" << layout_name(c.k_layout) << "_v_"
         << layout_name(c.v_layout) << "_out_" << layout_name(c.out_layout);
  }
  if (c.scale) text << "_scale" << *c.scale;
  if (c.logsumexp) text << "_lse";
  std::string name;
  for (char ch : text.str()) {  // a printed scale such as -0.3 becomes neg0p3
    name += ch == '-' ? std::string("neg") : ch == '.' ? std::string("p") : std::string(1, ch);
  }
  return name;
}

void PrintTo(const SdpaCase& c, std::ostream* os) { *os << describe(c); }

SdpaTensors::SdpaTensors(const SdpaCase& c)
    : q({c.B, c.H, c.Sq, c.D}, c.q_layout),
      k({c.B, c.Hkv, c.Sk, c.D}, c.k_layout),
      v({c.B, c.Hkv, c.Sk, c.Dv}, c.v_layout),
      out({c.B, c.H, c.Sq, c.Dv}, c.out_layout),
      lse({c.B, c.H, c.Sq}, c.out_layout) {}

SdpaTensors::SdpaTensors(const SdpaCase& c, uint64_t input_seed) : SdpaTensors(c) {
  std::mt19937_64 rng(input_seed);
  for (Tensor* input : {&q, &k, &v}) input->fill_uniform(rng, -1.0f, 1.0f);
}

attention::Backend test_backend() {
  const char* name = std::getenv("ATTENTION_TEST_BACKEND");
  if (name == nullptr || std::string(name) == "cpu") return attention::Backend::Auto;
  if (std::string(name) == "opencl") return attention::Backend::OpenCL;
  if (std::string(name) == "cuda") return attention::Backend::CUDA;
  ADD_FAILURE() << "ATTENTION_TEST_BACKEND=" << name << ": expected cpu, opencl or cuda";
  return attention::Backend::Auto;
}

bool skip_unless_backend_available() {
  const attention::Status available = attention::backend_available(test_backend());
  if (available.ok()) return false;
  [&] { GTEST_SKIP() << available.message(); }();  // marks the test skipped; the caller returns
  return true;
}

int64_t smallest_gpu_workspace(attention::Backend backend, int64_t head_unit, int64_t Sq,
                               int64_t Sk, int64_t Dv, bool masked, bool mha) {
  namespace detail = attention::detail;
  const detail::Run run =
      backend == attention::Backend::CUDA ? detail::Run::CUDA : detail::Run::OpenCL;
  const detail::SdpaRow& sdpa = detail::sdpa_row(run);
  const bool prefill = attention_contract::use_prefill(Sq);
  const char* kernel =
      mha      ? (masked ? detail::mha_row(run).masked.name : detail::mha_row(run).plain.name)
      : masked ? (prefill ? sdpa.masked.prefill.name : sdpa.masked.decode.name)
               : (prefill ? sdpa.plain.prefill.name : sdpa.plain.decode.name);
  return attention_contract::gpu_split_workspace_bytes(head_unit, 1, Sk, Dv,
                                                       detail::kernel_gpu_tiling(kernel));
}

attention::GpuOptions test_gpu_options(int64_t head_unit, int64_t Sq, int64_t Sk, int64_t Dv,
                                       bool masked, bool mha) {
  const attention::Backend backend = test_backend();
  static int calls = 0;
  attention::GpuOptions gpu;
  if (backend == attention::Backend::CPU || backend == attention::Backend::Auto || Sk == 0 ||
      calls++ % 2 == 0) {
    return gpu;
  }
  gpu.workspace_limit = smallest_gpu_workspace(backend, head_unit, Sq, Sk, Dv, masked, mha);
  return gpu;
}

bool is_native_bf16_prefill(const std::string& kernel) {
  return kernel == "sdpa_bf16_prefill" || kernel == "sdpa_bf16_amx_prefill";
}

std::string planned_kernel(int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D, bool masked,
                           attention::DType kv, attention::DType q_out) {
  const auto bytes = [](int64_t n, attention::DType dtype) {
    return static_cast<size_t>(std::max<int64_t>(n, 1)) *
           (dtype == attention::DType::Float32 ? 4 : 2);
  };
  std::vector<unsigned char> q(bytes(B * H * Sq * D, q_out)), k(bytes(B * H * Sk * D, kv)),
      v(k.size()), out(q.size());
  attention::SdpaOptions options;
  options.backend = attention::Backend::CPU;
  if (masked) options.mask.softcap = 30.0f;
  std::string plan;
  const attention::Status status = attention::explain_sdpa(
      attention::TensorView::contiguous(q.data(), q_out, {B, H, Sq, D}),
      attention::TensorView::contiguous(k.data(), kv, {B, H, Sk, D}),
      attention::TensorView::contiguous(v.data(), kv, {B, H, Sk, D}),
      attention::TensorView::contiguous(out.data(), q_out, {B, H, Sq, D}), options, &plan);
  if (!status.ok()) return "error: " + status.message();
  const size_t at = plan.find(" kernel=");
  if (at == std::string::npos) return "";
  return plan.substr(at + 8, plan.find(' ', at + 8) - (at + 8));
}

attention::DType native_bf16_weights(const attention::TensorView& q, const attention::TensorView& k,
                                     const attention::TensorView& v, attention::DType dtype,
                                     const attention::MaskOptions& mask) {
  const attention::Backend backend = test_backend();
  const bool cpu = backend == attention::Backend::CPU || backend == attention::Backend::Auto;
  const bool dense_rows = q.strides[3] == 1 && k.strides[3] == 1 && v.strides[3] == 1;
  int64_t causal_offset = 0;
  const bool native =
      cpu && dense_rows &&
      (attention::detail::bf16_prefill_for(dtype, dtype, dtype, dtype, !mask.empty(), q.shape[2],
                                           k.shape[2], q.shape[3]) != nullptr ||
       attention::detail::amx_prefill_takes(q, k, v, q, mask, &causal_offset));
  return native ? attention::DType::BFloat16 : attention::DType::Float32;
}

namespace {

void check_logsumexp(const SdpaCase& c, const Tensor& lse, const std::vector<double>& reference) {
  if (!c.logsumexp) return;
  EXPECT_TRUE(matches_reference(lse.to_dense(), reference, lse.shape(), Domain::Log))
      << "in logsumexp";
  EXPECT_TRUE(lse.outside_view_holds(kNaN)) << "in logsumexp's padding";
}

// run_and_compare in a half type: q, k, v, out and the additive mask converted (at their own
// strides), logsumexp fp32; the reference reads the rounded inputs, and the output meets the half
// rule (its storage rounding) while logsumexp, computed in fp32 from the same inputs, meets fp32's.
void run_and_compare_half(const SdpaCase& c, const attention::TensorView& q,
                          const attention::TensorView& k, const attention::TensorView& v,
                          Tensor& out, Tensor& lse, const attention::MaskOptions& mask,
                          attention::DType dtype) {
  out.poison();
  lse.poison();
  HalfCopy hq(q, dtype), hk(k, dtype), hv(v, dtype), hout(out.view(), dtype);
  std::optional<HalfCopy> additive;
  attention::MaskOptions half_mask = mask, rounded_mask = mask;
  if (mask.additive_mask.data != nullptr) {
    additive.emplace(mask.additive_mask, dtype);
    half_mask.additive_mask = additive->view();
    rounded_mask.additive_mask = additive->rounded();
  }
  attention::SdpaOptions options;
  options.backend = test_backend();
  options.gpu = test_gpu_options(q.shape[1] / std::max<int64_t>(k.shape[1], 1), q.shape[2],
                                 k.shape[2], v.shape[3], !mask.empty());
  options.scale = c.scale;
  options.mask = half_mask;
  if (c.logsumexp) options.logsumexp = lse.view();
  const attention::Status status = attention::scaled_dot_product_attention(
      hq.view(), hk.view(), hv.view(), hout.view(), options);
  ASSERT_TRUE(status.ok()) << status.message();
  hout.write_back();

  std::vector<double> reference_out, reference_lse, naive_out;
  const attention::MaskOptions* reference_mask = mask.empty() ? nullptr : &rounded_mask;
  reference_sdpa(hq.rounded(), hk.rounded(), hv.rounded(), c.effective_scale(), &reference_out,
                 c.logsumexp ? &reference_lse : nullptr, reference_mask);
  const attention::DType weights =
      native_bf16_weights(hq.view(), hk.view(), hv.view(), dtype, half_mask);
  if (weights != attention::DType::Float32) {
    reference_sdpa(hq.rounded(), hk.rounded(), hv.rounded(), c.effective_scale(), &naive_out,
                   nullptr, reference_mask, weights);
  }
  EXPECT_TRUE(matches_half_reference(out.to_dense(), reference_out, out.shape(), dtype,
                                     naive_out.empty() ? nullptr : &naive_out))
      << "in out (" << (dtype == attention::DType::Float16 ? "Float16" : "BFloat16") << ")";
  EXPECT_TRUE(out.outside_view_holds(kNaN)) << "in out's padding";
  check_logsumexp(c, lse, reference_lse);
}

}  // namespace

void run_and_compare(const SdpaCase& c, const attention::TensorView& q,
                     const attention::TensorView& k, const attention::TensorView& v, Tensor& out,
                     Tensor& lse, const attention::MaskOptions& mask) {
  if (skip_unless_backend_available()) return;
  const attention::DType dtype = test_dtype();
  if (dtype != attention::DType::Float32)
    return run_and_compare_half(c, q, k, v, out, lse, mask, dtype);
  out.poison();
  lse.poison();
  attention::SdpaOptions options;
  options.backend = test_backend();
  options.gpu = test_gpu_options(q.shape[1] / std::max<int64_t>(k.shape[1], 1), q.shape[2],
                                 k.shape[2], v.shape[3], !mask.empty());
  options.scale = c.scale;
  options.mask = mask;
  if (c.logsumexp) options.logsumexp = lse.view();
  const attention::Status status =
      attention::scaled_dot_product_attention(q, k, v, out.view(), options);
  ASSERT_TRUE(status.ok()) << status.message();

  std::vector<double> reference_out, reference_lse;
  reference_sdpa(q, k, v, c.effective_scale(), &reference_out,
                 c.logsumexp ? &reference_lse : nullptr, mask.empty() ? nullptr : &mask);
  EXPECT_TRUE(matches_reference(out.to_dense(), reference_out, out.shape())) << "in out";
  EXPECT_TRUE(out.outside_view_holds(kNaN)) << "in out's padding";
  check_logsumexp(c, lse, reference_lse);
}

void expect_sdpa_matches_reference(const SdpaCase& c, uint64_t seed) {
  SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
  SdpaTensors tensors(c, seed);
  run_and_compare(c, tensors.q.view(), tensors.k.view(), tensors.v.view(), tensors.out,
                  tensors.lse);
}

std::string describe(const MaskSpec& m) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : " + ") + part; };
  if (m.causal != attention::Causal::None) {
    add(m.causal == attention::Causal::TopLeft ? "causal top-left" : "causal bottom-right");
  }
  if (m.window >= 0) add("window " + std::to_string(m.window));
  if (m.window_forward > 0) add("forward " + std::to_string(m.window_forward));
  const std::string full = m.full_lengths ? "full " : "";
  if (m.key_lengths) add(full + "key lengths");
  if (m.query_lengths) add(full + "query lengths");
  const std::string broadcast =
      std::string(m.mask_batch_broadcast ? "1" : "B") + "x" + (m.mask_head_broadcast ? "1" : "H");
  if (m.bool_mask) add("bool mask " + broadcast);
  if (m.additive_mask)
    add("additive mask " + broadcast + " hiding with " + std::to_string(m.hidden_value));
  if (m.alibi) add(m.custom_slopes ? "alibi (given slopes)" : "alibi");
  if (m.softcap > 0) add("softcap " + std::to_string(m.softcap));
  return s.empty() ? "no mask" : s;
}

MaskTensors::MaskTensors(const MaskSpec& spec, const SdpaCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x6d61736bULL);  // independent of the q/k/v stream
  auto uniform_int = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  attention::MaskOptions& m = options;
  m.causal = spec.causal;
  m.window = spec.window;
  m.window_forward = spec.window_forward;
  if (spec.key_lengths) {
    for (int64_t b = 0; b < c.B; ++b)
      key_lengths.push_back(int32_t(spec.full_lengths ? c.Sk : uniform_int(0, c.Sk)));
    m.key_lengths =
        attention::TensorView::contiguous(key_lengths.data(), attention::DType::Int32, {c.B});
  }
  if (spec.query_lengths) {
    for (int64_t b = 0; b < c.B; ++b)
      query_lengths.push_back(int32_t(spec.full_lengths ? c.Sq : uniform_int(0, c.Sq)));
    m.query_lengths =
        attention::TensorView::contiguous(query_lengths.data(), attention::DType::Int32, {c.B});
  }
  const int64_t mb = spec.mask_batch_broadcast ? 1 : c.B;
  const int64_t mh = spec.mask_head_broadcast ? 1 : c.H;
  const int64_t count = mb * mh * c.Sq * c.Sk;
  if (spec.bool_mask) {
    for (int64_t n = 0; n < count; ++n) bool_mask.push_back(uniform_int(0, 3) != 0);
    m.bool_mask = attention::TensorView::contiguous(bool_mask.data(), attention::DType::Bool,
                                                    {mb, mh, c.Sq, c.Sk});
  }
  if (spec.additive_mask) {
    std::uniform_real_distribution<float> bias(-2.0f, 2.0f);
    for (int64_t n = 0; n < count; ++n) {
      additive_mask.push_back(uniform_int(0, 3) == 0 ? spec.hidden_value : bias(rng));
    }
    m.additive_mask = attention::TensorView::contiguous(additive_mask.data(), {mb, mh, c.Sq, c.Sk});
  }
  m.alibi = spec.alibi;
  if (spec.alibi && spec.custom_slopes) {
    std::uniform_real_distribution<float> slope(0.0f, 0.5f);
    for (int64_t h = 0; h < c.H; ++h) slopes.push_back(slope(rng));
    m.alibi_slopes = attention::TensorView::contiguous(slopes.data(), {c.H});
  }
  m.softcap = spec.softcap;
}

void expect_masked_sdpa_matches_reference(const SdpaCase& c, const MaskSpec& spec, uint64_t seed) {
  SCOPED_TRACE(describe(c) + ", " + describe(spec) + ", " + seed_note(seed));
  SdpaTensors tensors(c, seed);
  MaskTensors masks(spec, c, seed);
  run_and_compare(c, tensors.q.view(), tensors.k.view(), tensors.v.view(), tensors.out, tensors.lse,
                  masks.options);
}

}  // namespace attention_test
