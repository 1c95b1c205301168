#include "execute/gpu.h"

#include <HalideRuntimeCuda.h>
#include <HalideRuntimeOpenCL.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/kernel_choice.h"

namespace attention {
namespace detail {
namespace {

// The few driver entry points needed before any kernel runs, looked up at run time: the library
// links no GPU library, and a machine without a driver still runs the CPU kernels.
using CuInit = int (*)(unsigned);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuCtxGetCurrent = int (*)(void**);
using CuDevicePrimaryCtxRetain = int (*)(void**, int);
using ClGetPlatformIDs = int32_t (*)(uint32_t, void**, uint32_t*);
using ClGetDeviceIDs = int32_t (*)(void*, uint64_t, uint32_t, void**, uint32_t*);

void* cuda_driver() {
  static void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return handle;
}

template <typename Fn>
Fn cuda_symbol(const char* name) {
  return cuda_driver() ? reinterpret_cast<Fn>(dlsym(cuda_driver(), name)) : nullptr;
}

// Empty when usable, else why not. Probed once per process.
std::string probe_cuda() {
  if (!cuda_driver()) return "no CUDA driver (libcuda.so.1 not found)";
  auto init = cuda_symbol<CuInit>("cuInit");
  auto count = cuda_symbol<CuDeviceGetCount>("cuDeviceGetCount");
  if (!init || !count) return "the CUDA driver lacks cuInit/cuDeviceGetCount";
  if (const int code = init(0); code != 0) {
    return "cuInit failed (CUresult " + std::to_string(code) + "): no usable CUDA device";
  }
  int devices = 0;
  if (count(&devices) != 0 || devices == 0) return "the CUDA driver reports no device";
  return "";
}

std::string probe_opencl() {
  void* library = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) return "no OpenCL ICD loader (libOpenCL.so.1 not found)";
  auto platforms = reinterpret_cast<ClGetPlatformIDs>(dlsym(library, "clGetPlatformIDs"));
  auto devices = reinterpret_cast<ClGetDeviceIDs>(dlsym(library, "clGetDeviceIDs"));
  if (!platforms || !devices) return "libOpenCL.so.1 lacks clGetPlatformIDs/clGetDeviceIDs";
  void* platform_ids[16];
  uint32_t platform_count = 0;
  if (platforms(16, platform_ids, &platform_count) != 0 || platform_count == 0) {
    return "no OpenCL platform (is an ICD such as pocl-opencl-icd installed?)";
  }
  constexpr uint64_t kAllDevices = 0xFFFFFFFF;  // CL_DEVICE_TYPE_ALL
  for (uint32_t p = 0; p < platform_count && p < 16; ++p) {
    uint32_t device_count = 0;
    if (devices(platform_ids[p], kAllDevices, 0, nullptr, &device_count) == 0 && device_count > 0)
      return "";
  }
  return "no OpenCL device on any platform";
}

const std::string& unavailable(Backend backend) {
#if !ATTENTION_GPU
  static const std::string no_kernels = "this build has no GPU kernels (they are built on x86)";
  if (backend == Backend::CUDA || backend == Backend::OpenCL) return no_kernels;
#endif
  static std::once_flag cuda_once, opencl_once;
  static std::string cuda_reason, opencl_reason;
  static const std::string none;
  if (backend == Backend::CUDA) {
    std::call_once(cuda_once, [] { cuda_reason = probe_cuda(); });
    return cuda_reason;
  }
  if (backend == Backend::OpenCL) {
    std::call_once(opencl_once, [] { opencl_reason = probe_opencl(); });
    return opencl_reason;
  }
  return none;
}

const char* device_name(Device device) { return device == Device::CUDA ? "CUDA" : "CPU"; }
const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::CPU:
      return "CPU";
    case Backend::CUDA:
      return "CUDA";
    case Backend::OpenCL:
      return "OpenCL";
    case Backend::Auto:
      break;
  }
  return "Auto";
}

#if ATTENTION_GPU
// The hooks installed before ours: an application's own Halide pipelines keep them.
halide_cuda_acquire_context_t previous_acquire = nullptr;
halide_cuda_release_context_t previous_release = nullptr;
halide_cuda_get_stream_t previous_get_stream = nullptr;

// Halide's CUDA runtime creates a context of its own by default; device pointers from the
// application (PyTorch, cudaMalloc) live in the context current on the calling thread or in the
// device's primary context, so our kernels run there instead. Other calls go to the previous hook.
int acquire_cuda_context(void* user_context, void** ctx, bool create) {
  if (!is_our_call(user_context) && previous_acquire != nullptr) {
    return previous_acquire(user_context, ctx, create);
  }
  void* current = nullptr;
  auto get_current = cuda_symbol<CuCtxGetCurrent>("cuCtxGetCurrent");
  if (get_current && get_current(&current) == 0 && current != nullptr) {
    *ctx = current;
    return 0;
  }
  static void* primary = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    auto device_get = cuda_symbol<CuDeviceGet>("cuDeviceGet");
    auto retain = cuda_symbol<CuDevicePrimaryCtxRetain>("cuDevicePrimaryCtxRetain");
    int device = 0;
    if (device_get && retain && device_get(&device, 0) == 0) retain(&primary, device);
  });
  if (primary == nullptr) return halide_error_code_generic_error;
  *ctx = primary;
  return 0;
}

int release_cuda_context(void* user_context) {
  if (!is_our_call(user_context) && previous_release != nullptr) {
    return previous_release(user_context);
  }
  return 0;
}
#endif

}  // namespace

Device device_of(const NamedViews& tensors) {
  for (const NamedView& t : tensors) {
    if (given(*t.view)) return t.view->device;
  }
  return Device::CPU;
}

Status resolve_backend(Backend backend, const NamedViews& tensors, Run* run) {
  // Absent optional views (no data, no rank) carry no device.
  const NamedView* first = nullptr;
  for (const NamedView& t : tensors) {
    if (!given(*t.view)) continue;
    // A code outside the enum (an integer cast by the caller) is refused even when every tensor
    // carries it: the routes' host copies are Device::CPU, and their inner calls would refuse it
    // only after rows were written.
    if (t.view->device != Device::CPU && t.view->device != Device::CUDA) {
      return Status::invalid(std::string(t.name) + ": device code " +
                             std::to_string(static_cast<int>(t.view->device)) +
                             " is not a Device (expected Device::CPU or Device::CUDA)");
    }
    if (first == nullptr) {
      first = &t;
    } else if (t.view->device != first->view->device) {
      return Status::invalid(std::string(t.name) + ": on Device::" + device_name(t.view->device) +
                             " but " + first->name +
                             " is on Device::" + device_name(first->view->device) +
                             ": every tensor of a call must be on the same device");
    }
  }
  const Device device = first ? first->view->device : Device::CPU;
  if (backend == Backend::Auto) backend = device == Device::CUDA ? Backend::CUDA : Backend::CPU;
  if (device == Device::CUDA && backend != Backend::CUDA) {
    return Status::invalid(std::string(first->name) +
                           ": a Device::CUDA tensor, but the backend is " + backend_name(backend) +
                           " (which reads host memory only)");
  }
  ATTENTION_RETURN_IF_ERROR(backend_available(backend));
  *run = backend == Backend::CUDA ? Run::CUDA : backend == Backend::OpenCL ? Run::OpenCL : Run::CPU;
  return Status::ok_status();
}

Status plan_gpu_chunks(const GpuTiling& t, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t Dv,
                       const GpuOptions& gpu, const char* option, int64_t head_unit,
                       std::vector<GpuChunk>* chunks) {
  const int64_t limit = gpu_workspace_limit(gpu);
  chunks->clear();
  // The bytes are linear in heads and in whole tiles of rows.
  const int64_t per_tile = attention_contract::gpu_split_workspace_bytes(1, 1, Sk, Dv, t);
  const int64_t pairs = limit / per_tile;  // (batch, head) pairs that fit with one tile of rows
  if (pairs < head_unit) {
    return Status::invalid(
        std::string(option) + ".workspace_limit: " + std::to_string(limit) +
        " bytes is below the " + std::to_string(head_unit * per_tile) +
        " bytes the split results of one chunk need (" + std::to_string(t.query_tile) +
        " query rows of " + std::to_string(head_unit) + (head_unit == 1 ? " head" : " heads") +
        " against Sk=" + std::to_string(Sk) + " keys, Dv=" + std::to_string(Dv) + ")");
  }
  int64_t batches = B, heads = H;
  if (pairs < B * H) {
    batches = std::max<int64_t>(pairs / H, 1);
    heads = pairs >= H ? H : pairs / head_unit * head_unit;
  }
  const int64_t tiles = (Sq + t.query_tile - 1) / t.query_tile;
  const int64_t rows =
      std::min(tiles, std::max<int64_t>(pairs / (batches * heads), 1)) * t.query_tile;
  for (int64_t b = 0; b < B; b += batches) {
    for (int64_t h = 0; h < H; h += heads) {
      for (int64_t i = 0; i < Sq; i += rows) {
        chunks->push_back(
            {b, std::min(batches, B - b), h, std::min(heads, H - h), i, std::min(rows, Sq - i)});
      }
    }
  }
  return Status::ok_status();
}

Status check_cuda_stream(const GpuOptions& gpu, const char* name, Run run) {
  if (gpu.cuda_stream == nullptr || run == Run::CUDA) return Status::ok_status();
  return Status::invalid(std::string(name) + ".cuda_stream: set, but the call runs on the " +
                         (run == Run::OpenCL ? "OpenCL" : "CPU") +
                         " backend (a CUDA stream orders Backend::CUDA calls only)");
}

Status resolve_device_options(const DeviceOptions& device, const NamedViews& tensors, Run* run) {
  ATTENTION_RETURN_IF_ERROR(resolve_backend(device.backend, tensors, run));
  return check_cuda_stream(device.gpu, "device.gpu", *run);
}

int cuda_stream_of(void* user_context, void* context, void** stream) {
  if (is_our_call(user_context)) {
    *stream = static_cast<KernelCall*>(user_context)->cuda_stream;
    return 0;
  }
#if ATTENTION_GPU
  if (previous_get_stream != nullptr) return previous_get_stream(user_context, context, stream);
#endif
  (void)context;
  *stream = nullptr;  // Halide's default: the default stream
  return 0;
}

namespace {

// [B, H, Sq, ...] as [B, H / group, group · Sq, ...], when heads and rows merge into one stride.
bool heads_as_rows(const TensorView& t, int64_t group, TensorView* view) {
  const int64_t Sq = t.shape[2];
  if (Sq != 1 && t.strides[1] != Sq * t.strides[2]) return false;
  *view = t;
  view->shape[1] = t.shape[1] / group;
  view->strides[1] = t.strides[1] * group;
  view->shape[2] = Sq * group;
  view->strides[2] = Sq == 1 ? t.strides[1] : t.strides[2];
  return true;
}

}  // namespace

bool gqa_rows(const TensorView& q, const TensorView& out, const TensorView& lse,
              const MaskOptions& mask, int64_t group, GqaRows* rows) {
  const int64_t Sq = q.shape[2];
  if (group <= 1 || Sq < 1 || Sq > attention_contract::kDecodeMaxQueries) return false;
  GqaRows r;
  r.mask = mask;
  if (Sq == 1 && mask.causal == Causal::BottomRight && mask.window < 0)
    r.mask.causal = Causal::None;
  const bool same_for_every_row = r.mask.causal == Causal::None && r.mask.window < 0 &&
                                  !given(r.mask.query_lengths) && !given(r.mask.bool_mask) &&
                                  !given(r.mask.additive_mask) && !r.mask.alibi &&
                                  !given(r.mask.alibi_slopes);
  if (!same_for_every_row || !heads_as_rows(q, group, &r.q) || !heads_as_rows(out, group, &r.out))
    return false;
  // logsumexp's rows are the kernels' innermost dimension, which must be dense.
  if (given(lse) && (!heads_as_rows(lse, group, &r.lse) || r.lse.strides[2] != 1)) return false;
  *rows = r;
  return true;
}

Status check_gpu_strides(const NamedViews& tensors) {
  for (const NamedView& t : tensors) {
    if (!given(*t.view)) continue;
    for (int d = 0; d < t.view->rank; ++d) {
      if (t.view->strides[d] < 0) {
        return Status::invalid(std::string(t.name) + ": negative stride " +
                               std::to_string(t.view->strides[d]) + " in dimension " +
                               std::to_string(d) +
                               ": the GPU backends need non-negative strides (reversed views "
                               "run on the CPU backend)");
      }
    }
  }
  return Status::ok_status();
}

#if ATTENTION_GPU
GpuCall::GpuCall(Run run, void* cuda_stream)
    : interface_(run == Run::CUDA ? halide_cuda_device_interface()
                                  : halide_opencl_device_interface()) {
  configure_halide_runtime();
  call_.cuda_stream = run == Run::CUDA ? cuda_stream : nullptr;
  if (run == Run::CUDA) {
    static std::once_flag once;
    std::call_once(once, [] {
      previous_acquire = halide_set_cuda_acquire_context(acquire_cuda_context);
      previous_release = halide_set_cuda_release_context(release_cuda_context);
      previous_get_stream = halide_set_cuda_get_stream(cuda_stream_of);
    });
  }
}

GpuCall::~GpuCall() { release_from(Marks{}); }

void GpuCall::release_from(const Marks& from) {
  // Crops first: they alias staging allocations.
  for (size_t i = from.cropped; i < cropped_.size(); ++i) {
    halide_device_release_crop(&call_, cropped_[i]);
  }
  for (size_t i = from.wrapped; i < wrapped_.size(); ++i) {
    halide_cuda_detach_device_ptr(&call_, wrapped_[i]);
  }
  for (size_t i = from.allocated; i < allocated_.size(); ++i) {
    halide_device_free(&call_, allocated_[i]);
  }
  cropped_.resize(from.cropped);
  wrapped_.resize(from.wrapped);
  allocated_.resize(from.allocated);
}

Status GpuCall::input(halide_buffer_t* buffer, Device device) {
  bool staged = device == Device::CPU && buffer->host != nullptr && buffer->dimensions > 0;
  for (int d = 0; d < buffer->dimensions; ++d) staged = staged && buffer->dim[d].stride >= 0;
  if (staged && buffer->size_in_bytes() > 0 && buffer->size_in_bytes() <= kStagedInputBytes) {
    pending_.push_back(buffer);
    return Status::ok_status();
  }
  return attach(buffer, device);
}

Status GpuCall::attach(halide_buffer_t* buffer, Device device) {
  if (device == Device::CUDA) {
    const auto device_ptr = reinterpret_cast<uintptr_t>(buffer->host);
    buffer->host = nullptr;
    const int code = halide_cuda_wrap_device_ptr(&call_, buffer, device_ptr);
    if (code != 0) return failure("halide_cuda_wrap_device_ptr", code);
    wrapped_.push_back(buffer);
    return Status::ok_status();
  }
  if (broadcast(*buffer)) return input_span(buffer);
  // Halide copies a host-dirty buffer to the device when the kernel first reads it there.
  buffer->set_host_dirty(true);
  allocated_.push_back(buffer);
  return Status::ok_status();
}

bool GpuCall::broadcast(const halide_buffer_t& buffer) {
  bool repeats = false;
  for (int d = 0; d < buffer.dimensions; ++d) {
    if (buffer.dim[d].stride < 0) return false;
    repeats = repeats || (buffer.dim[d].stride == 0 && buffer.dim[d].extent > 1);
  }
  // One dimension of bytes: larger spans take Halide's own copy.
  return repeats && buffer.host != nullptr &&
         buffer.size_in_bytes() <= static_cast<size_t>(std::numeric_limits<int32_t>::max());
}

// Halide's copy plan cannot merge a stride-0 dimension, so it would copy a broadcast buffer one
// element per transfer: for the neutral masks (one element repeated over [B, H, Sq, Sk]) that
// was B·H·Sq·Sk calls of cuMemcpyHtoD, 1.5 s for one 32-head paged decode at 4096 keys (H100).
// The device copy has the buffer's own strides, so the bytes it spans, copied once, are the same.
// Broadcasts within kStagedInputBytes (the neutral masks among them) are staged instead
// (stage_pending copies spans the same way); this serves the larger ones.
Status GpuCall::input_span(halide_buffer_t* buffer) {
  int code = halide_device_malloc(&call_, buffer, interface_);
  if (code != 0) return failure("halide_device_malloc", code);
  allocated_.push_back(buffer);
  halide_dimension_t bytes(0, static_cast<int32_t>(buffer->size_in_bytes()), 1);
  halide_buffer_t span{};
  span.device = buffer->device;
  span.device_interface = buffer->device_interface;
  span.host = buffer->begin();
  span.type = halide_type_t(halide_type_uint, 8);
  span.dimensions = 1;
  span.dim = &bytes;
  span.set_host_dirty(true);
  code = halide_copy_to_device(&call_, &span, interface_);
  if (code != 0) return failure("halide_copy_to_device", code);
  buffer->set_host_dirty(false);
  return Status::ok_status();
}

// The pieces sit at multiples of kAlign bytes: OpenCL sub-buffers (Halide's crops there) must
// start at CL_DEVICE_MEM_BASE_ADDR_ALIGN, 4096 bits on the strictest devices.
Status GpuCall::stage_pending() {
  if (pending_.empty()) return Status::ok_status();
  constexpr size_t kAlign = 512;
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const halide_buffer_t* buffer : pending_) {
    offsets.push_back(total);
    total += (buffer->size_in_bytes() + kAlign - 1) / kAlign * kAlign;
  }
  Staging& staging = staging_.emplace_back();
  staging.host.resize(total);
  for (size_t i = 0; i < pending_.size(); ++i) {
    // Non-negative strides: a buffer's bytes start at its host pointer.
    std::memcpy(&staging.host[offsets[i]], pending_[i]->host, pending_[i]->size_in_bytes());
  }
  staging.bytes = halide_dimension_t(0, static_cast<int32_t>(total), 1);
  halide_buffer_t& whole = staging.buffer;
  whole.host = staging.host.data();
  whole.type = halide_type_t(halide_type_uint, 8);
  whole.dimensions = 1;
  whole.dim = &staging.bytes;
  whole.set_host_dirty(true);
  int code = halide_device_malloc(&call_, &whole, interface_);
  if (code != 0) return failure("halide_device_malloc", code);
  allocated_.push_back(&whole);
  code = halide_copy_to_device(&call_, &whole, interface_);
  if (code != 0) return failure("halide_copy_to_device", code);
  // Halide's crop takes a source of the crop's rank and places it at
  // sum((crop.min - source.min) * source.stride) source elements: a byte view whose first
  // dimension starts `offset` before the crop's, its other dimensions where the crop's start.
  for (size_t i = 0; i < pending_.size(); ++i) {
    halide_buffer_t* buffer = pending_[i];
    std::vector<halide_dimension_t> dims(buffer->dim, buffer->dim + buffer->dimensions);
    dims[0].min -= static_cast<int32_t>(offsets[i]);
    dims[0].stride = 1;
    halide_buffer_t source = whole;
    source.dimensions = buffer->dimensions;
    source.dim = dims.data();
    code = halide_device_crop(&call_, &source, buffer);
    if (code != 0) return failure("halide_device_crop", code);
    cropped_.push_back(buffer);
  }
  pending_.clear();
  return Status::ok_status();
}

Status GpuCall::output(halide_buffer_t* buffer, Device device) {
  ATTENTION_RETURN_IF_ERROR(attach(buffer, device));
  if (device == Device::CUDA) return Status::ok_status();  // written in place on the device
  buffer->set_host_dirty(false);
  host_outputs_.push_back(buffer);
  return Status::ok_status();
}

Status GpuCall::mask_inputs(MaskArgs& mask, const MaskOptions& options) {
  for (halide_buffer_t* host : {mask.key_lengths(), mask.query_lengths(), mask.alibi_slopes()}) {
    ATTENTION_RETURN_IF_ERROR(input(host, Device::CPU));
  }
  auto device = [](const TensorView& t) { return given(t) ? t.device : Device::CPU; };
  ATTENTION_RETURN_IF_ERROR(input(mask.bool_mask_view().get(), device(options.bool_mask)));
  return input(mask.additive_mask_view().get(), device(options.additive_mask));
}

Status GpuCall::scratch(halide_buffer_t* buffer) {
  buffer->host = nullptr;
  const int code = halide_device_malloc(&call_, buffer, interface_);
  if (code != 0) return failure("halide_device_malloc", code);
  allocated_.push_back(buffer);
  return Status::ok_status();
}

void GpuCall::release(halide_buffer_t* buffer) {
  // A crop's staging allocation stays until the call ends (small).
  for (auto* list : {&allocated_, &wrapped_, &cropped_, &host_outputs_, &pending_}) {
    const auto at = std::find(list->begin(), list->end(), buffer);
    if (at == list->end()) continue;
    if (list == &allocated_) halide_device_free(&call_, buffer);
    if (list == &wrapped_) halide_cuda_detach_device_ptr(&call_, buffer);
    if (list == &cropped_) halide_device_release_crop(&call_, buffer);
    list->erase(at);
  }
}

Status GpuCall::begin_chunk() {
  ATTENTION_RETURN_IF_ERROR(stage_pending());  // the buffers of the whole call
  in_chunk_ = true;
  chunk_outputs_ = host_outputs_.size();
  chunk_ = {wrapped_.size(), allocated_.size(), cropped_.size()};
  return Status::ok_status();
}

Status GpuCall::wait() {
  halide_buffer_t* any = !allocated_.empty() ? allocated_.front()
                         : !wrapped_.empty() ? wrapped_.front()
                                             : nullptr;
  if (any == nullptr) return Status::ok_status();
  if (const int code = halide_device_sync(&call_, any); code != 0) {
    return failure("waiting for the call's kernels", code);
  }
  return Status::ok_status();
}

Status GpuCall::failure(const char* what, int code) {
  return Status::error(status_code_of_halide_error(code),
                       std::string("internal: ") + what + " failed (code " + std::to_string(code) +
                           "): " + call_.error);
}

Status GpuCall::finish() {
  for (halide_buffer_t* buffer : host_outputs_) {
    if (const int code = halide_copy_to_host(&call_, buffer); code != 0) {
      return failure("copying an output back to the host", code);
    }
  }
  // On a caller's stream the copies are queued (cuMemcpyDtoHAsync): wait for them.
  if (call_.cuda_stream != nullptr && !host_outputs_.empty()) {
    if (const int code = halide_device_sync(&call_, host_outputs_.front()); code != 0) {
      return failure("waiting for the outputs' copies", code);
    }
  }
  if (!in_chunk_) return Status::ok_status();
  release_from(chunk_);
  host_outputs_.resize(chunk_outputs_);
  in_chunk_ = false;
  return Status::ok_status();
}
#endif  // ATTENTION_GPU

}  // namespace detail

Status backend_available(Backend backend) {
  const std::string& reason = detail::unavailable(backend);
  if (reason.empty()) return Status::ok_status();
  return Status::error(StatusCode::BackendUnavailable, std::string("backend ") +
                                                           detail::backend_name(backend) +
                                                           " is not available here: " + reason);
}

}  // namespace attention
