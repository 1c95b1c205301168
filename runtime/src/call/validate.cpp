#include "call/validate.h"

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <numeric>

namespace attention::detail {
namespace {

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// Lowest and one-past-highest element offsets a non-empty view touches.
struct Span {
  int64_t lo = 0, hi = 0;
};
Span element_span(const TensorView& t) {
  Span s{0, 1};
  for (int d = 0; d < t.rank; ++d) {
    const int64_t reach = t.strides[d] * (t.shape[d] - 1);
    (reach < 0 ? s.lo : s.hi) += reach;
  }
  return s;
}

}  // namespace

std::string shape_string(const TensorView& t) {
  std::string s = "[";
  for (int d = 0; d < t.rank; ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  return s + "]";
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return "Float32";
    case DType::Bool:
      return "Bool";
    case DType::Int32:
      return "Int32";
    case DType::Float16:
      return "Float16";
    case DType::BFloat16:
      return "BFloat16";
  }
  return "unknown";
}

int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return 1;
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    default:
      return 4;
  }
}

Status check_float_view(const TensorView& t, const char* name, int rank, const char* layout,
                        Device device, bool any_strides) {
  if (t.rank == rank && !is_floating(t.dtype)) {
    return Status::invalid(std::string(name) +
                           ": expected dtype Float32, Float16 or BFloat16, got " +
                           dtype_name(t.dtype));
  }
  return check_view(t, name, rank, layout, t.dtype, any_strides, device);
}

Status check_view(const TensorView& t, const char* name, int rank, const char* layout, DType dtype,
                  bool any_strides, Device device) {
  // The argument's name, made only for an error (a call's checks allocate nothing).
  const auto arg = [name] { return std::string(name) + ": "; };
  if (t.rank != rank) {
    return Status::invalid(arg() + "expected a rank-" + std::to_string(rank) + " tensor " + layout +
                           ", got rank " + std::to_string(t.rank));
  }
  if (t.dtype != dtype) {
    return Status::invalid(arg() + "expected dtype " + dtype_name(dtype) + ", got " +
                           dtype_name(t.dtype));
  }
  if (t.device != device) {
    return Status::invalid(arg() + (device == Device::CPU ? "expected a CPU tensor"
                                                          : "expected a Device::CUDA tensor"));
  }
  for (int d = 0; d < rank; ++d) {
    if (t.shape[d] < 0) {
      return Status::invalid(arg() + "negative size in shape " + shape_string(t) + " " + layout);
    }
  }
  if (t.numel() == 0) return Status::ok_status();
  if (t.data == nullptr) {
    return Status::invalid(arg() + "data is null for a non-empty tensor " + shape_string(t));
  }
  if (!any_strides && t.strides[rank - 1] != 1) {
    return Status::invalid(arg() +
                           "innermost dimension must be contiguous (stride 1), got stride " +
                           std::to_string(t.strides[rank - 1]));
  }
  for (int d = 0; d < rank; ++d) {
    if (t.shape[d] > kMaxInt32 || std::abs(t.strides[d]) > kMaxInt32) {
      return Status::invalid(arg() + "sizes and strides must fit in int32, got shape " +
                             shape_string(t));
    }
  }
  const Span span = element_span(t);
  if ((span.hi - span.lo) * dtype_size(dtype) > kMaxInt32) {
    return Status::invalid(arg() + "spans more than 2 GiB; the kernels index with 32 bits");
  }
  return Status::ok_status();
}

namespace {

Status check_dims(const TensorView& t, const char* name, const ExpectedDim* expected, size_t n) {
  bool match = true;
  for (size_t d = 0; d < n; ++d) {
    match = match && (expected[d].extent < 0 || t.shape[d] == expected[d].extent);
  }
  if (match) return Status::ok_status();  // no message built: a call's checks allocate nothing
  std::string want = "[";
  for (size_t d = 0; d < n; ++d) {
    want += d ? ", " : "";
    want += expected[d].name;
    if (expected[d].extent >= 0) want += "=" + std::to_string(expected[d].extent);
  }
  return Status::invalid(std::string(name) + ": expected shape " + want + "], got " +
                         shape_string(t));
}

}  // namespace

Status check_shape(const TensorView& t, const char* name,
                   std::initializer_list<ExpectedDim> expected) {
  return check_dims(t, name, expected.begin(), expected.size());
}

Status check_shape(const TensorView& t, const char* name,
                   const std::vector<ExpectedDim>& expected) {
  return check_dims(t, name, expected.data(), expected.size());
}

Status check_disjoint(const TensorView& out, const char* out_name, const TensorView& in,
                      const char* in_name) {
  if (out.numel() == 0 || in.numel() == 0) return Status::ok_status();
  const Span a = element_span(out), b = element_span(in);
  // Compare as integers: pointers into unrelated arrays are not ordered by the standard.
  const auto a_base = reinterpret_cast<uintptr_t>(out.data);
  const auto b_base = reinterpret_cast<uintptr_t>(in.data);
  const int64_t a_size = dtype_size(out.dtype), b_size = dtype_size(in.dtype);
  const uintptr_t a_lo = a_base + a.lo * a_size, a_hi = a_base + a.hi * a_size;
  const uintptr_t b_lo = b_base + b.lo * b_size, b_hi = b_base + b.hi * b_size;
  if (a_lo < b_hi && b_lo < a_hi) {
    return Status::invalid(std::string(out_name) + ": memory overlaps " + in_name +
                           "; outputs must not alias inputs or other outputs");
  }
  return Status::ok_status();
}

Status check_no_self_overlap(const TensorView& out, const char* name) {
  if (out.numel() == 0) return Status::ok_status();
  int dims[kMaxRank], count = 0;
  for (int d = 0; d < out.rank; ++d) {
    if (out.shape[d] > 1) dims[count++] = d;
  }
  // By |stride|, an insertion sort of at most kMaxRank dims (GCC 12's -Warray-bounds misreads
  // std::sort over this fixed array at -O3).
  for (int i = 1; i < count; ++i) {
    const int d = dims[i];
    int j = i;
    for (; j > 0 && std::abs(out.strides[dims[j - 1]]) > std::abs(out.strides[d]); --j)
      dims[j] = dims[j - 1];
    dims[j] = d;
  }
  // Sufficient condition: each stride steps past everything the inner dimensions span.
  int64_t inner_span = 0;
  for (int i = 0; i < count; ++i) {
    const int d = dims[i];
    if (std::abs(out.strides[d]) <= inner_span) {
      return Status::invalid(std::string(name) +
                             ": strides make distinct elements share memory (stride " +
                             std::to_string(out.strides[d]) + " of dim " + std::to_string(d) +
                             "); outputs need non-overlapping strides");
    }
    inner_span += std::abs(out.strides[d]) * (out.shape[d] - 1);
  }
  return Status::ok_status();
}

Status check_output_memory(const TensorView& out, const char* name, const NamedViews& others) {
  ATTENTION_RETURN_IF_ERROR(check_no_self_overlap(out, name));
  for (const NamedView& other : others) {
    ATTENTION_RETURN_IF_ERROR(check_disjoint(out, name, *other.view, other.name));
  }
  return Status::ok_status();
}

Status check_gpu_options(const GpuOptions& gpu, const char* name) {
  if (gpu.workspace_limit >= 0) return Status::ok_status();
  return Status::invalid(
      std::string(name) + ".workspace_limit: must be >= 0 bytes (0: the default, " +
      std::to_string(kDefaultGpuWorkspaceLimit) + "), got " + std::to_string(gpu.workspace_limit));
}

Status check_optional_output(const TensorView& t, const char* name, const char* layout,
                             std::initializer_list<ExpectedDim> extents, const NamedViews& others,
                             Device device) {
  if (!given(t)) return Status::ok_status();
  ATTENTION_RETURN_IF_ERROR(check_view(t, name, static_cast<int>(extents.size()), layout,
                                       DType::Float32, /*any_strides=*/false, device));
  ATTENTION_RETURN_IF_ERROR(check_shape(t, name, extents));
  return check_output_memory(t, name, others);
}

}  // namespace attention::detail
