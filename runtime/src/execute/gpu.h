// GPU calls: which backend a call runs on, and the halide_buffer_t plumbing around a GPU kernel
// (device pointers wrapped without copies; host tensors copied in and out). Also GQA decode as
// one head's rows (gqa_rows), which the GPU calls and the CPU decode calls (run_cpu_decode) share.
#pragma once

#include <HalideRuntime.h>

#include <deque>
#include <tuple>
#include <vector>

#include "attention/attention.h"
#include "call/mask_args.h"
#include "call/validate.h"
#include "kernel_contract.h"
#include "kernels/halide_view.h"

namespace attention::detail {

enum class Run { CPU, CUDA, OpenCL };

// The device of a call's tensors, which resolve_backend found to be one: the first given view's
// (CPU when none is given). Run::CUDA takes host tensors too, copied to the GPU and back.
Device device_of(const NamedViews& tensors);

// Resolves options.backend against the tensors of a call (`tensors`: every view given, inputs and
// outputs, named): all on one device, a backend that reads that device, and available here.
Status resolve_backend(Backend backend, const NamedViews& tensors, Run* run);

// gpu.cuda_stream (`name`: how the caller spells the options) is for CUDA calls only.
Status check_cuda_stream(const GpuOptions& gpu, const char* name, Run run);

// The backend a tensor utility (convert_dtype, apply_rotary_embedding) runs on for its `tensors`
// and DeviceOptions `device` (the parameter's name in errors): resolve_backend, then a stream
// only for CUDA.
Status resolve_device_options(const DeviceOptions& device, const NamedViews& tensors, Run* run);

// The CUstream Halide's CUDA runtime queues a call's work on: the KernelCall's for a call of this
// library (our hook, installed with the context hooks), else what the previous hook says.
int cuda_stream_of(void* user_context, void* context, void** stream);

// GQA decode as one head's rows (on the GPU; on the CPU where the rows make the decode kernels'
// row block, attention_contract::kDecodeRowBlock): with `group` query heads per kv head
// (group > 1) and at most kDecodeMaxQueries rows, a call whose mask treats every row of every head
// alike (none, key lengths, softcap; bottom-right causal of one row, which hides no key) equals
// the call on q [B, Hkv, group·Sq, D], out [B, Hkv, group·Sq, Dv] and logsumexp
// [B, Hkv, group·Sq]: query head kv·group + g's row i is row g·Sq + i of kv head kv. The decode
// kernel's blocks then read each split of k and v once per tile of those rows instead of once per
// query head. Views qualify when a head's rows and the next head's continue one stride (one row, or
// rows packed per head), for logsumexp a dense one. Returns false, `rows` untouched, for calls that
// do not qualify.
struct GqaRows {
  TensorView q, out, lse;  // lse: only when given
  MaskOptions mask;        // the call's, bottom-right causal of one row dropped
};
bool gqa_rows(const TensorView& q, const TensorView& out, const TensorView& lse,
              const MaskOptions& mask, int64_t group, GqaRows* rows);

// A CPU decode call (decode_tiling: the kernel the call runs tiles for decode) whose GQA group's
// rows make the decode kernels' row block (attention_contract::kDecodeRowBlock rows at D =
// kDecodeRowBlockDim) runs as one head's rows where the mask allows (gqa_rows): each work item
// then reads its split of k and v once, every row using each key as it streams by. `Hkv`: the
// call's kv heads. `run(q, out, lse, mask)` makes the call.
template <typename RunCall>
Status run_cpu_decode(bool decode_tiling, const TensorView& q, int64_t Hkv, const TensorView& out,
                      const TensorView& lse, const MaskOptions& m, const RunCall& run) {
  namespace contract = attention_contract;
  GqaRows rows;
  if (decode_tiling && Hkv > 0 && contract::decode_row_block_rows(q.shape[1] / Hkv * q.shape[2]) &&
      q.shape[3] == contract::kDecodeRowBlockDim &&
      gqa_rows(q, out, lse, m, q.shape[1] / Hkv, &rows)) {
    return run(rows.q, rows.out, rows.lse, rows.mask);
  }
  return run(q, out, lse, m);
}

// Halide's device copies and wrapped device pointers need non-negative strides (its OpenCL and
// CUDA runtimes abort otherwise): a GPU call with a reversed dimension is refused up front.
Status check_gpu_strides(const NamedViews& tensors);

// The buffers of one GPU kernel call. Small host inputs (block tables, lengths, slopes, the
// neutral masks' one element: kStagedInputBytes at most) go to the device together, in one
// transfer into one allocation, each a device crop of it: a serving call's half-dozen small inputs
// would otherwise each pay a synchronous copy. Larger host inputs are marked host-dirty, so Halide
// copies them to the device; CUDA tensors are wrapped (halide_cuda_wrap_device_ptr) and never
// copied. After the call, outputs on the host are copied back, and every device allocation Halide
// made, wrapped or cropped is released.
// The GPU kernels take Float16 and BFloat16 tensors as their raw 16-bit words (UInt(16)) and
// convert in the kernel (generators/algorithm/bfloat16.h): `buffer`, a HalideView of such a
// tensor, retyped for them.
inline void as_half_bits(halide_buffer_t* buffer) {
  buffer->type = halide_type_t(halide_type_uint, 16);
}

class GpuCall {
 public:
  // cuda_stream: GpuOptions::cuda_stream (Run::CUDA only).
  explicit GpuCall(Run run, void* cuda_stream = nullptr);
  ~GpuCall();
  GpuCall(const GpuCall&) = delete;
  GpuCall& operator=(const GpuCall&) = delete;

  // `buffer` (a HalideView of a tensor on `device`: its host field holds the tensor's data pointer,
  // a CUdeviceptr for CUDA) is read or written by the kernel. Buffers outlive the call.
  Status input(halide_buffer_t* buffer, Device device);
  Status output(halide_buffer_t* buffer, Device device);
  // The mask arguments: lengths and slopes are host copies; the mask tensors on the call's device.
  Status mask_inputs(MaskArgs& mask, const MaskOptions& options);
  // An output the caller did not ask for (logsumexp): device memory only, freed afterwards.
  Status scratch(halide_buffer_t* buffer);
  // Buffers registered from here on belong to one chunk of a call (kernel_choice.h, GpuChunk):
  // the next run() releases their device memory once its outputs are back, so a call in chunks
  // holds one chunk's buffers at a time. Those registered before (k, v) stay until the call ends
  // (small host ones are copied to the device here).
  Status begin_chunk();
  // Releases one buffer registered before the current chunk (its device memory, or its wrapping),
  // e.g. the k and v of a finished group of chunks. Not during a chunk.
  void release(halide_buffer_t* buffer);

  // Waits for the work queued on the call's stream (CUDA; OpenCL calls have returned by then),
  // e.g. before freeing device memory a queued kernel may still read.
  Status wait();

  // Runs `kernel` (built with user_context) and brings the outputs back.
  template <typename Kernel, typename... Args>
  Status run(const char* kernel_name, Kernel kernel, Args... args) {
    ATTENTION_RETURN_IF_ERROR(stage_pending());
    const int code = kernel(&call_, args...);
    if (code != 0) return failure(kernel_name, code);
    return finish();
  }
  // run with the arguments in parts (tuples), concatenated in order (see run_kernel_parts).
  template <typename Kernel, typename... Parts>
  Status run_parts(const char* kernel_name, Kernel kernel, const Parts&... parts) {
    return std::apply([&](auto... args) { return run(kernel_name, kernel, args...); },
                      std::tuple_cat(parts...));
  }

 private:
  Status failure(const char* what, int code);
  // A host buffer that repeats elements (a stride-0 dimension) and its one-transfer device copy.
  static bool broadcast(const halide_buffer_t& buffer);
  Status input_span(halide_buffer_t* buffer);
  // A buffer on `device` the kernel reads or writes, without staging.
  Status attach(halide_buffer_t* buffer, Device device);
  // Copies the pending small host inputs to the device in one transfer, each then a crop of it.
  Status stage_pending();
  Status finish();
  // Where each list's buffers of a chunk start.
  struct Marks {
    size_t wrapped = 0, allocated = 0, cropped = 0;
  };
  // Releases the crops, wrappings and allocations from `from` on, dropping them from the lists.
  void release_from(const Marks& from);

  // One staging allocation: its bytes on the host and their device copy.
  struct Staging {
    std::vector<uint8_t> host;
    halide_dimension_t bytes{};
    halide_buffer_t buffer{};
  };

  const halide_device_interface_t* interface_;
  KernelCall call_;
  std::vector<halide_buffer_t*> host_outputs_, allocated_, wrapped_, cropped_, pending_;
  std::deque<Staging> staging_;  // a deque: allocated_ points at its buffers
  // Where the current chunk's buffers start in the lists above (begin_chunk), or none.
  bool in_chunk_ = false;
  size_t chunk_outputs_ = 0;
  Marks chunk_;
};

// The largest host input GpuCall stages (copies to the device with the call's other small ones).
inline constexpr size_t kStagedInputBytes = size_t{256} << 10;

}  // namespace attention::detail
