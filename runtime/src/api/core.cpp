// TensorView, Status and the thread-count setting.
#include <HalideBuffer.h>
#include <HalideRuntime.h>

#include <algorithm>

#include "attention/attention.h"
#include "attention_kernel_info.h"
#include "kernels/generated_kernels.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_slots.h"
#include "kernels/kernel_table.h"

namespace attention {
namespace {

void copy_dims(std::initializer_list<int64_t> from, std::array<int64_t, kMaxRank>& to) {
  std::copy_n(from.begin(), std::min<size_t>(from.size(), kMaxRank), to.begin());
}

}  // namespace

TensorView TensorView::contiguous(float* data, std::initializer_list<int64_t> shape) {
  return contiguous(data, DType::Float32, shape);
}

TensorView TensorView::strided(float* data, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides) {
  return strided(data, DType::Float32, shape, strides);
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  TensorView t;
  t.dtype = dtype;
  t.data = data;
  t.rank = static_cast<int>(std::min<size_t>(shape.size(), kMaxRank));
  copy_dims(shape, t.shape);
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= std::max<int64_t>(t.shape[d], 1);
  }
  return t;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides) {
  TensorView t;
  t.dtype = dtype;
  t.data = data;
  t.rank = static_cast<int>(std::min<size_t>(shape.size(), kMaxRank));
  copy_dims(shape, t.shape);
  copy_dims(strides, t.strides);
  return t;
}

bool MaskOptions::empty() const {
  return causal == Causal::None && window < 0 && window_forward == 0 &&
         key_lengths.data == nullptr && query_lengths.data == nullptr &&
         bool_mask.data == nullptr && additive_mask.data == nullptr && !alibi &&
         alibi_slopes.data == nullptr && softcap == 0.0f;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::Ok:
      return "ok";
    case StatusCode::InvalidArgument:
      return "invalid argument";
    case StatusCode::Unsupported:
      return "unsupported";
    case StatusCode::BackendUnavailable:
      return "backend unavailable";
    case StatusCode::OutOfMemory:
      return "out of memory";
    case StatusCode::KernelFailure:
      return "kernel failure";
  }
  return "unknown";
}

void set_num_threads(int n) { halide_set_num_threads(n < 1 ? 0 : n); }

int num_threads() {
  // Halide reports 0 until its pool is configured; asking for the default configures it.
  if (halide_get_num_threads() < 1) halide_set_num_threads(0);
  return halide_get_num_threads();
}

std::string cpu_kernel_target() { return detail::cpu_kernel_info().target; }

void set_tuned_kernels(bool enabled) { detail::set_tuned_enabled(enabled); }
bool tuned_kernels_enabled() { return detail::tuned_enabled_now(); }

std::vector<std::string> tuned_kernel_buckets() {
  std::vector<std::string> buckets;
  for (const auto& [bucket, kernel] : detail::tuned_kernels_here()) buckets.push_back(bucket);
  return buckets;
}

namespace detail {

CpuKernelInfo read_kernel_info(KernelInfoFn probe) {
  constexpr int kBytes = 256;  // the generator's output extents (it checks them)
  Halide::Runtime::Buffer<uint8_t> name(kBytes);
  Halide::Runtime::Buffer<int32_t> tiling(CpuTiling::kFields, 2);
  CpuKernelInfo result;
  if (probe(nullptr, name.raw_buffer(), tiling.raw_buffer()) != 0) {
    // Never seen; any split is still correct with these, merely less even.
    result.target = "unknown";
    result.prefill = attention_contract::cpu_tiling(4, 16, true);
    result.decode = attention_contract::cpu_tiling(4, 16, false);
    return result;
  }
  const char* text = reinterpret_cast<const char*>(name.data());
  result.target.assign(text, std::find(text, text + kBytes, '\0'));
  auto read = [&](int which) {
    std::array<int, CpuTiling::kFields> fields{};
    for (int f = 0; f < CpuTiling::kFields; ++f) fields[f] = tiling(f, which);
    return CpuTiling::from_fields(fields);
  };
  result.prefill = read(0);
  result.decode = read(1);
  return result;
}

const CpuKernelInfo& cpu_kernel_info() {
  // A kernel built for the same targets as every other reports its own target and tilings: the
  // dispatch that picks it is the one that picks theirs.
  static const CpuKernelInfo info = read_kernel_info(attention_kernel_info);
  return info;
}

}  // namespace detail

}  // namespace attention
