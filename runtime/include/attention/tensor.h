// The basic types of the attention API: tensors, devices and backends, Status, threads.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

namespace attention {

// Element type of a tensor. Attention operands (q, k, v, out) are Float32, Float16 (IEEE half) or
// BFloat16, in any combination, e.g. fp32 queries and outputs over a half KV cache; Bool (1 byte,
// nonzero = true) and Int32 appear in masks and lengths. Whatever the storage, scores, softmax and
// accumulation are fp32 and a half output is rounded once, at the end (to nearest even; beyond
// Float16's range ±inf). logsumexp is always Float32.
enum class DType { Float32, Bool, Int32, Float16, BFloat16 };

// Where a tensor's memory lives: host memory, or CUDA device memory (data is the CUdeviceptr,
// cast to void*). The functions with a backend option (SdpaOptions, MhaOptions, DeviceOptions) take
// CUDA tensors, the others host tensors only. Every tensor of one call must live on the same
// device; a code outside the enum is refused, naming the tensor.
enum class Device { CPU, CUDA };

// Which kernels run a call of scaled_dot_product_attention or multi_head_attention.
//   Auto    by the tensors' device: CUDA tensors run the CUDA kernels, host tensors the CPU ones.
//   CPU     the CPU kernels (host tensors only).
//   CUDA    the CUDA kernels. Host tensors are copied to the GPU and back around each call: the
//           slow path, for convenience; keep tensors on the device for speed.
//   OpenCL  the same GPU schedules compiled for OpenCL, on the first OpenCL device (host tensors,
//           copied in and out). CI runs them on PoCL, so the GPU code is checked without a GPU.
// The library dispatches by this choice, never by Halide's multi-target (which would pick the GPU
// for every call of a CUDA-enabled build).
enum class Backend { Auto, CPU, CUDA, OpenCL };

constexpr int kMaxRank = 4;

// A non-owning strided view of a row-major tensor, e.g. q of shape [B, H, S, D].
// Strides are in elements, not bytes; strides may be any value the operation documents (the
// innermost dimension of every attention operand must be contiguous). Unused trailing entries are
// ignored.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::Float32;
  Device device = Device::CPU;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};

  // A densely packed row-major view (the last dimension has stride 1).
  static TensorView contiguous(float* data, std::initializer_list<int64_t> shape);
  // A view with explicit per-dimension strides (in elements), outermost first.
  static TensorView strided(float* data, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides);
  // The same for other element types (data points at elements of `dtype`).
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape);
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides);
  // Number of elements (the product of the shape; 0 if any dimension is 0).
  int64_t numel() const;
};

// What kind of error a Status holds, for an application to react to without parsing messages.
enum class StatusCode {
  Ok,
  InvalidArgument,     // a bad shape, stride, dtype, device or option: the message names it
  Unsupported,         // a valid request this build or backend does not do (yet)
  BackendUnavailable,  // the backend asked for cannot run on this machine (no driver, no device)
  OutOfMemory,         // host or device memory could not be allocated for the call
  KernelFailure,       // a generated kernel or the GPU runtime reported an error
};

// Result of every entry point: ok, or an error with a code and a message that names the argument
// and what was expected.
class Status {
 public:
  static Status ok_status() { return Status(); }
  static Status invalid(std::string message) {
    return error(StatusCode::InvalidArgument, std::move(message));
  }
  static Status error(StatusCode code, std::string message) {
    return Status(code == StatusCode::Ok ? StatusCode::KernelFailure : code, std::move(message));
  }
  bool ok() const { return code_ == StatusCode::Ok; }
  explicit operator bool() const { return ok(); }
  StatusCode code() const { return code_; }
  // Empty when ok().
  const std::string& message() const { return message_; }

 private:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::Ok;
  std::string message_;
};

// The code in words, e.g. "invalid argument", "backend unavailable" or "out of memory".
const char* status_code_name(StatusCode code);

// ok when `backend` can run here: for CUDA a driver (libcuda.so.1) with at least one device, for
// OpenCL an ICD loader (libOpenCL.so.1) with a device; otherwise an error saying what is missing.
// CPU and Auto are always ok. A call on an unavailable backend fails with the same message.
Status backend_available(Backend backend);

// Options of the GPU backends (CUDA, OpenCL); CPU calls ignore them (but reject a negative limit).
struct GpuOptions {
  // Most device memory, in bytes, a call's split results may take: the partial outputs of each
  // block of 64 keys (128 for decode) that the split-KV kernels write before combining them, about
  // 8 · B·H · Sq · (Sk / 64) · Dv' bytes, Dv' being Dv rounded up to 128 (decode: 256). A call
  // that needs more runs in chunks of query rows (and, when one tile of 64 rows of every head is
  // still too much, of batches and heads) that fit, with the same results bit for bit. 0 takes
  // kDefaultGpuWorkspaceLimit. A limit below the smallest chunk (64 rows, decode 2, of the query
  // heads of one kv head; multi_head_attention: of every head of one batch) is an InvalidArgument
  // error naming gpu.workspace_limit and the least it needs.
  int64_t workspace_limit = 0;
  // Backend::CUDA: the CUstream (as void*) the call's kernels and device copies are queued on,
  // after the work the caller queued there before; nullptr: the default stream. Read device
  // outputs in that stream's order (the call may return before its last kernel ends); outputs on
  // the host are copied back before it returns. Other backends refuse it (InvalidArgument).
  void* cuda_stream = nullptr;
};
inline constexpr int64_t kDefaultGpuWorkspaceLimit = int64_t{1} << 30;  // 1 GiB

// Where a tensor utility (convert_dtype, apply_rotary_embedding) runs.
struct DeviceOptions {
  // Auto: Device::CUDA tensors on the GPU, host tensors on the CPU. OpenCL: host tensors through
  // the OpenCL kernels. CUDA: host or device tensors on the GPU.
  Backend backend = Backend::Auto;
  GpuOptions gpu;  // cuda_stream (Backend::CUDA): the work is queued there
};

// Converts `from` into `to`, between Float32 and Float16 or BFloat16 in either direction (e.g. an
// fp32 KV cache into a half one), with the generated conversion kernels (CPU: all cores; GPU: the
// GPU convert kernels, the same results bit for bit): rounding to nearest even, beyond Float16's
// range ±inf, NaN stays NaN; widening is exact. Same shape, rank 1 to 4, tensors that do not
// overlap, both on one device; on the CPU the innermost dimension is contiguous and other strides
// any, on a GPU any non-negative strides.
Status convert_dtype(const TensorView& from, const TensorView& to,
                     const DeviceOptions& device = {});

// Number of worker threads the kernels use, process-wide (Halide's thread pool). Defaults to the
// HL_NUM_THREADS environment variable if set, else the number of cores. n < 1 restores that
// default. Safe to call at any time, also while other threads run kernels. Results never depend on
// it: each work item reduces in a fixed order on one thread, so outputs are bit-identical for any
// thread count and from run to run (on the same CPU; another ISA variant may round differently).
void set_num_threads(int n);
int num_threads();

}  // namespace attention
