// mod_attention: SDPA kernels fused with a user mod (attention/mod_attention.h), called through
// their argv entry points with the arguments their metadata names: the mod's own inputs can be
// anything the mod declared, so the runtime needs no signature per mod.
#include "attention/mod_attention.h"

#include <HalideRuntime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "call/sdpa_call.h"
#include "call/tensor_util.h"
#include "call/validate.h"
#include "execute/gpu.h"
#include "execute/half_precision.h"
#include "kernels/halide_view.h"
#include "kernels/kernel_choice.h"

namespace attention {
namespace {

// Keys per prefill split when a mod's key ranges skip whole splits.
constexpr int32_t kSkippedBlockKeys = 512;

bool same_type(const halide_type_t& a, const halide_type_t& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// The dtype a mod tensor of Halide type `t` is passed as.
bool dtype_matches(DType dtype, const halide_type_t& t) {
  switch (dtype) {
    case DType::Float32:
      return same_type(t, halide_type_t(halide_type_float, 32));
    case DType::Int32:
      return same_type(t, halide_type_t(halide_type_int, 32));
    case DType::Bool:
      return same_type(t, halide_type_t(halide_type_uint, 8));
    default:
      return false;
  }
}

const char* declared_dtype(const halide_type_t& t) {
  if (same_type(t, halide_type_t(halide_type_float, 32))) return "Float32";
  if (same_type(t, halide_type_t(halide_type_int, 32))) return "Int32";
  if (same_type(t, halide_type_t(halide_type_uint, 8))) return "Bool";
  return "an unsupported type";
}

// Storage for one argv slot: a scalar's value (argv points at it) or a buffer.
union ScalarSlot {
  void* handle;
  float f32;
  int32_t i32;
  bool b;
};

// A call's argv, built from the kernel's metadata.
class ArgvBuilder {
 public:
  explicit ArgvBuilder(size_t count) : scalars_(count), argv_(count, nullptr) {}
  void buffer(int i, halide_buffer_t* b) { argv_[i] = b; }
  ScalarSlot& scalar(int i) {
    argv_[i] = &scalars_[i];
    return scalars_[i];
  }
  void** argv() { return argv_.data(); }

 private:
  std::vector<ScalarSlot> scalars_;
  std::vector<void*> argv_;
};

// How errors name a mod input: arguments["document_ids"].
std::string arguments_name(const char* name) { return std::string("arguments[\"") + name + "\"]"; }

const ModArgument* find_argument(const std::vector<ModArgument>& arguments, const char* name) {
  for (const ModArgument& a : arguments) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

bool is_builtin_argument(const char* name) {
  for (const char* builtin : {"__user_context", "q", "k", "v", "scale", "values_finite",
                              "key_split", "out", "logsumexp", "out.0", "out.1", "key_ranges"}) {
    if (std::strcmp(name, builtin) == 0) return true;
  }
  return false;
}

// The mod's inputs as the kernel declares them (metadata), against `arguments`: every declared
// input given once with its kind, dtype and rank; nothing else given.
Status check_mod_arguments(const char* mod, const halide_filter_metadata_t& md,
                           const std::vector<ModArgument>& arguments, const TensorView& out,
                           Device device) {
  const std::string prefix = std::string("mod ") + mod + ": ";
  for (size_t a = 0; a < arguments.size(); ++a) {
    for (size_t b = 0; b < a; ++b) {
      if (arguments[a].name == arguments[b].name) {
        return Status::invalid(prefix + "arguments: '" + arguments[a].name + "' is given twice");
      }
    }
    bool declared = false;
    for (int i = 0; i < md.num_arguments; ++i) {
      declared = declared || (!is_builtin_argument(md.arguments[i].name) &&
                              arguments[a].name == md.arguments[i].name);
    }
    if (!declared) {
      return Status::invalid(prefix + "arguments: the mod declares no input '" + arguments[a].name +
                             "'");
    }
  }
  for (int i = 0; i < md.num_arguments; ++i) {
    const halide_filter_argument_t& arg = md.arguments[i];
    if (is_builtin_argument(arg.name)) continue;
    const ModArgument* given = find_argument(arguments, arg.name);
    const bool buffer = arg.kind == halide_argument_kind_input_buffer;
    const std::string what = buffer ? std::string("a ") + declared_dtype(arg.type) +
                                          " tensor of rank " + std::to_string(arg.dimensions)
                                    : std::string("a ") + declared_dtype(arg.type) + " scalar";
    if (given == nullptr) {
      return Status::invalid(prefix + "arguments: missing '" + arg.name + "' (" + what + ")");
    }
    if (given->is_scalar == buffer) {
      return Status::invalid(prefix + arguments_name(arg.name) + " must be " + what);
    }
    if (!buffer) {
      const bool integer = same_type(arg.type, halide_type_t(halide_type_int, 32));
      const double x = given->scalar;
      if (!std::isfinite(x) ||
          (integer && (x != std::floor(x) || x < INT32_MIN || x > INT32_MAX))) {
        return Status::invalid(prefix + arguments_name(arg.name) + " must be " + what + ", got " +
                               std::to_string(x));
      }
      continue;
    }
    const TensorView& t = given->tensor;
    const std::string name = arguments_name(arg.name);
    if (!dtype_matches(t.dtype, arg.type)) {
      return Status::invalid(prefix + name + ": dtype " + detail::dtype_name(t.dtype) +
                             ", expected " + declared_dtype(arg.type));
    }
    if (t.device != Device::CPU && t.device != device) {
      return Status::invalid(prefix + name +
                             ": a Device::CUDA tensor, but the call's tensors are host tensors "
                             "(a mod tensor is on the host or on the call's device)");
    }
    // On the host or on the call's device (checked above).
    ATTENTION_RETURN_IF_ERROR(detail::check_view(t, name.c_str(), arg.dimensions,
                                                 "(as the mod declares)", t.dtype,
                                                 /*any_strides=*/false, t.device));
    ATTENTION_RETURN_IF_ERROR(detail::check_disjoint(out, "out", t, name.c_str()));
  }
  return Status::ok_status();
}

// A failed kernel call as a Status. The kernel checks the mod's tensors against their declared
// shapes before it computes anything: a requirement it states, or (Halide proves the reads from the
// declared extents) a read past a smaller tensor's end. Both are the caller's argument.
Status kernel_error(const char* mod, const char* kernel, int code, const std::string& message,
                    const std::vector<ModArgument>& arguments) {
  const std::string where = "mod " + std::string(mod) + " (" + kernel + "): ";
  if (code != halide_error_code_requirement_failed &&
      code != halide_error_code_access_out_of_bounds) {
    return Status::error(detail::status_code_of_halide_error(code), where + message);
  }
  for (const ModArgument& a : arguments) {
    if (a.is_scalar || message.find("buffer " + a.name + " ") == std::string::npos) continue;
    return Status::invalid(where + arguments_name(a.name.c_str()) + ": shape " +
                           detail::shape_string(a.tensor) + " is not the shape the mod declares (" +
                           message + ")");
  }
  return Status::invalid(where + message);
}

// What the mod kernels take besides the mod's own inputs, by argument name.
struct KernelTensors {
  TensorView q, k, v, out, logsumexp;
  TensorView key_ranges;  // the key_ranges kernel's output, the prefill kernel's input
  float scale;
  int32_t key_split;
  bool values_finite;
};

bool takes_input(const halide_filter_metadata_t& md, const char* name) {
  for (int i = 0; i < md.num_arguments; ++i) {
    if (std::strcmp(md.arguments[i].name, name) == 0) return true;
  }
  return false;
}

// A `kernel` that reads key ranges needs the set's key_ranges kernel, which makes them.
Status check_key_ranges_kernel(const char* mod, const ModKernels& kernels,
                               const ModKernel& kernel) {
  if (!takes_input(*kernel.metadata(), "key_ranges") ||
      (kernels.key_ranges.argv != nullptr && kernels.key_ranges.metadata != nullptr)) {
    return Status::ok_status();
  }
  return Status::invalid(std::string("kernels: mod ") + mod + " (" + kernel.name +
                         ") reads key ranges, and kernels.key_ranges is not given");
}

// The argv of `kernel` from its metadata: `buffer(name)` gives each tensor argument's
// halide_buffer_t (q, k, v, out, logsumexp, key_ranges or a mod tensor), the scalars come from `t`
// and `arguments` (checked by check_mod_arguments). *user_context: the index of the context slot.
Status fill_argv(const char* mod, const ModKernel& kernel, const KernelTensors& t,
                 const std::vector<ModArgument>& arguments,
                 const std::function<halide_buffer_t*(const std::string&)>& buffer,
                 ArgvBuilder* argv, int* user_context) {
  const halide_filter_metadata_t& md = *kernel.metadata();
  for (int i = 0; i < md.num_arguments; ++i) {
    const halide_filter_argument_t& arg = md.arguments[i];
    const std::string name = arg.name;
    if (name == "__user_context") {
      *user_context = i;
      argv->scalar(i).handle = nullptr;
    } else if (arg.kind != halide_argument_kind_input_scalar) {
      argv->buffer(i, buffer(name));
    } else if (name == "scale") {
      argv->scalar(i).f32 = t.scale;
    } else if (name == "key_split") {
      argv->scalar(i).i32 = t.key_split;
    } else if (name == "values_finite") {
      argv->scalar(i).b = t.values_finite;
    } else {
      const ModArgument* given = find_argument(arguments, arg.name);
      if (given == nullptr) {
        return Status::invalid("mod " + std::string(mod) + " (" + kernel.name + "): missing " +
                               arguments_name(arg.name));
      }
      if (same_type(arg.type, halide_type_t(halide_type_float, 32))) {
        argv->scalar(i).f32 = static_cast<float>(given->scalar);
      } else if (same_type(arg.type, halide_type_t(halide_type_int, 32))) {
        argv->scalar(i).i32 = static_cast<int32_t>(given->scalar);
      } else {
        return Status::invalid("mod " + std::string(mod) + ": input " + name +
                               " has a scalar type this runtime cannot pass");
      }
    }
  }
  return Status::ok_status();
}

// Runs a CPU `kernel` on host tensors with the arguments its metadata names.
Status run_mod_kernel(const char* mod, const ModKernel& kernel, const KernelTensors& t,
                      const std::vector<ModArgument>& arguments) {
  std::deque<detail::HalideView> views;
  const TensorView none;
  const auto buffer = [&](const std::string& name) {
    // A CPU kernel's outputs are one Tuple: out.0 is out, out.1 the logsumexp with a stride-0
    // feature dimension (detail::RowStats).
    if (name == "out.0") return views.emplace_back(t.out).get();
    if (name == "out.1") {
      return views.emplace_back(t.logsumexp, detail::RowStats{t.out.shape[3]}).get();
    }
    const ModArgument* given = find_argument(arguments, name.c_str());
    const TensorView& tensor = name == "q"            ? t.q
                               : name == "k"          ? t.k
                               : name == "v"          ? t.v
                               : name == "out"        ? t.out
                               : name == "logsumexp"  ? t.logsumexp
                               : name == "key_ranges" ? t.key_ranges
                               : given != nullptr     ? given->tensor
                                                      : none;
    return views.emplace_back(tensor).get();
  };
  ArgvBuilder argv(kernel.metadata()->num_arguments);
  int user_context = 0;
  ATTENTION_RETURN_IF_ERROR(fill_argv(mod, kernel, t, arguments, buffer, &argv, &user_context));
  detail::configure_halide_runtime();
  detail::KernelCall call;
  argv.scalar(user_context).handle = &call;
  const int code = kernel.argv(argv.argv());
  if (code == 0) return Status::ok_status();
  return kernel_error(mod, kernel.name, code, call.error, arguments);
}

// The backend a mod kernel was generated for, from its metadata's target (Halide's string).
detail::Run kernel_run(const ModKernel& kernel) {
  const auto api = detail::gpu_api_of_target(kernel.metadata()->target);
  if (!api) return detail::Run::CPU;
  return *api == attention_contract::GpuApi::CUDA ? detail::Run::CUDA : detail::Run::OpenCL;
}

const char* run_name(detail::Run run) {
  return run == detail::Run::CUDA ? "CUDA" : run == detail::Run::OpenCL ? "OpenCL" : "the CPU";
}

#if ATTENTION_GPU
// A GPU call (Sk >= 1) of fp32 tensors, whole: the mod's tensors may span every batch and head,
// and the kernels check their shapes against q's. A mod with a mask_mod runs its key_ranges
// kernel first; the ranges come back to the host (B·H·tiles pairs) and go in with the call.
Status run_mod_gpu(const char* mod, const ModKernels& kernels, detail::Run run,
                   const attention_contract::GpuTiling& tiling, const KernelTensors& t,
                   const std::vector<ModArgument>& arguments, const SdpaOptions& options) {
  const int64_t B = t.q.shape[0], H = t.q.shape[1], Sq = t.q.shape[2];
  const bool scan = takes_input(*kernels.prefill.metadata(), "key_ranges");
  const int64_t tiles = (Sq + tiling.query_tile - 1) / tiling.query_tile;
  std::vector<int32_t> ranges(scan ? static_cast<size_t>(B * H * tiles * 2) : 0);
  // The buffers outlive `call`, whose destructor releases their device memory.
  std::deque<detail::HalideView> views;
  detail::GpuCall call(run, options.gpu.cuda_stream);
  std::vector<std::pair<std::string, halide_buffer_t*>> buffers;
  const auto add = [&](const std::string& name, const TensorView& tensor, bool output) {
    detail::HalideView& view = views.emplace_back(tensor);
    buffers.emplace_back(name, view.get());
    return output ? call.output(view.get(), tensor.device) : call.input(view.get(), tensor.device);
  };
  for (const ModArgument& a : arguments) {
    if (!a.is_scalar) ATTENTION_RETURN_IF_ERROR(add(a.name, a.tensor, false));
  }
  ATTENTION_RETURN_IF_ERROR(add("q", t.q, false));
  ATTENTION_RETURN_IF_ERROR(add("k", t.k, false));
  ATTENTION_RETURN_IF_ERROR(add("v", t.v, false));
  // Runs `kernel` with the buffers registered so far.
  const auto run_kernel = [&](const ModKernel& kernel) -> Status {
    const auto buffer = [&](const std::string& name) -> halide_buffer_t* {
      for (const auto& [n, b] : buffers) {
        if (name == n) return b;
      }
      return nullptr;  // never: every argument of the kernels is registered above
    };
    ArgvBuilder argv(kernel.metadata()->num_arguments);
    int user_context = 0;
    ATTENTION_RETURN_IF_ERROR(fill_argv(mod, kernel, t, arguments, buffer, &argv, &user_context));
    int code = 0;
    std::string error;  // the kernel's own message (GpuCall's status wraps it)
    const Status status = call.run(kernel.name, [&](detail::KernelCall* context) {
      argv.scalar(user_context).handle = context;
      code = kernel.argv(argv.argv());
      if (code != 0) error = context->error;
      return code;
    });
    if (status.ok() || code == 0) return status;
    return kernel_error(mod, kernel.name, code, error, arguments);
  };
  if (scan) {
    const TensorView ranges_view =
        TensorView::contiguous(ranges.data(), DType::Int32, {B, H, tiles, 2});
    // The scan's output on the host, then the attention kernel's input.
    ATTENTION_RETURN_IF_ERROR(add("key_ranges", ranges_view, true));
    ATTENTION_RETURN_IF_ERROR(run_kernel(kernels.key_ranges));
    buffers.pop_back();
    ATTENTION_RETURN_IF_ERROR(add("key_ranges", ranges_view, false));
  }
  ATTENTION_RETURN_IF_ERROR(add("out", t.out, true));
  // Without a logsumexp, the kernel writes it to device scratch.
  if (detail::given(t.logsumexp)) {
    ATTENTION_RETURN_IF_ERROR(add("logsumexp", t.logsumexp, true));
  } else {
    detail::HalideView& view = views.emplace_back(TensorView::contiguous(nullptr, {B, H, Sq}));
    buffers.emplace_back("logsumexp", view.get());
    ATTENTION_RETURN_IF_ERROR(call.scratch(view.get()));
  }
  return run_kernel(kernels.prefill);
}
#else
Status run_mod_gpu(const char*, const ModKernels&, detail::Run,
                   const attention_contract::GpuTiling&, const KernelTensors&,
                   const std::vector<ModArgument>&, const SdpaOptions&) {
  // check_sdpa_call refuses GPU backends first; this is its guard.
  return Status::error(StatusCode::BackendUnavailable, "internal: no GPU kernels in this build");
}
#endif

// A call on the GPU backend `run` its kernels were generated for (checked by the caller).
Status gpu_mod_attention(const char* mod, const ModKernels& kernels, detail::Run run,
                         const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, const std::vector<ModArgument>& arguments,
                         const SdpaOptions& options) {
  const Device device = detail::device_of({{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}});
  ATTENTION_RETURN_IF_ERROR(
      check_mod_arguments(mod, *kernels.prefill.metadata(), arguments, out, device));
  ATTENTION_RETURN_IF_ERROR(check_key_ranges_kernel(mod, kernels, kernels.prefill));
  if (out.numel() == 0) return Status::ok_status();
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const int64_t Sk = k.shape[2], Dv = v.shape[3];
  // The mod kernels' tiling: the GPU prefill tiling of their API (the generator's default).
  const attention_contract::GpuTiling tiling =
      attention_contract::gpu_tiling(run == detail::Run::CUDA ? attention_contract::GpuApi::CUDA
                                                              : attention_contract::GpuApi::OpenCL,
                                     /*wide_queries=*/true);
  // The split results, checked against the limit before anything is written. A mod call runs
  // whole (run_mod_gpu), so the limit is on the call's.
  const int64_t limit = detail::gpu_workspace_limit(options.gpu);
  const int64_t need = attention_contract::gpu_split_workspace_bytes(B * H, Sq, Sk, Dv, tiling);
  if (Sk > 0 && need > limit) {
    return Status::invalid("gpu.workspace_limit: " + std::to_string(limit) +
                           " bytes is below the " + std::to_string(need) +
                           " bytes the split results of this call need (mod_attention runs a "
                           "call whole, since a mod's tensors may span every batch and head: "
                           "raise the limit or call with fewer batches)");
  }
  const float scale = options.scale.value_or(1.0f / std::sqrt(static_cast<float>(D)));
  // Half operands as fp32 (device scratch for Device::CUDA tensors), out rounded once.
  return detail::with_fp32_scratch(device, options.gpu.cuda_stream, [&](auto& scratch) -> Status {
    TensorView q32, k32, v32, out32;
    ATTENTION_RETURN_IF_ERROR(scratch.widen(q, &q32));
    ATTENTION_RETURN_IF_ERROR(scratch.widen(k, &k32));
    ATTENTION_RETURN_IF_ERROR(scratch.widen(v, &v32));
    ATTENTION_RETURN_IF_ERROR(scratch.stage(out, &out32));
    if (Sk == 0) {  // host tensors (check_sdpa_call refuses Device::CUDA ones): no keys to see
      detail::write_rows_without_keys(out32, options.logsumexp);
    } else {
      // The GPU masked kernels always take the NaN-safe P·V.
      const KernelTensors t{q32,
                            k32,
                            v32,
                            out32,
                            options.logsumexp,
                            TensorView{},
                            scale,
                            tiling.split_keys,
                            /*values_finite=*/false};
      ATTENTION_RETURN_IF_ERROR(run_mod_gpu(mod, kernels, run, tiling, t, arguments, options));
    }
    return scratch.finish(out32, out);
  });
}

// A checked CPU call with rows (out not empty) of fp32 operands on `kernel` (the prefill or decode
// kernel of `choice`): the mod's key ranges first where the kernel takes them, then the kernel.
Status run_mod_cpu(const char* mod, const ModKernels& kernels, const ModKernel& kernel,
                   const attention_contract::KernelChoice& choice, const TensorView& q,
                   const TensorView& k, const TensorView& v, const TensorView& out,
                   const std::vector<ModArgument>& arguments, const SdpaOptions& options) {
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const int64_t Sk = k.shape[2];
  if (Sk == 0) {  // no keys: every row sees none
    detail::write_rows_without_keys(out, options.logsumexp);
    return Status::ok_status();
  }
  const halide_filter_metadata_t& md = *kernel.metadata();
  const detail::CpuKernelInfo& info = detail::cpu_kernel_info();
  detail::ScratchFloats lse_scratch;
  TensorView lse;
  ATTENTION_RETURN_IF_ERROR(
      detail::stats_or_scratch(options.logsumexp, {B, H, Sq}, lse_scratch, &lse));
  KernelTensors t{q, k, v, out, lse, TensorView{},
                  options.scale.value_or(1.0f / std::sqrt(static_cast<float>(D))), choice.key_split,
                  // A non-finite v at a hidden key would reach rows through 0 · NaN; prefill's
                  // plain P·V is only safe without them (decode always takes the safe form).
                  choice.prefill && detail::all_finite(v)};
  // Block skipping: the mod's key range per query tile, scanned by its key_ranges kernel.
  std::vector<int32_t> ranges;
  if (takes_input(md, "key_ranges")) {
    ATTENTION_RETURN_IF_ERROR(check_key_ranges_kernel(mod, kernels, kernel));
    const int64_t groups = (Sq + info.prefill.query_tile - 1) / info.prefill.query_tile;
    // Splits are the skipped blocks: at most 512 keys. Inside a visited split every stage stops
    // at the tile's range (SdpaFuncs::grouped), so a larger split wastes nothing and costs fewer
    // split results (1x8x2048x64, AVX2, against the built-in kernels: causal mod 1.13x at 512
    // against 1.11-1.22x at 256, window 512 1.08-1.16x against 1.23-1.28x; 8 documents in 4096
    // tokens 72-81 ms against 81-83; bench/RESULTS.md).
    t.key_split = std::min<int32_t>(t.key_split, kSkippedBlockKeys);
    ranges.resize(static_cast<size_t>(B * H * groups * 2));
    t.key_ranges = TensorView::contiguous(ranges.data(), DType::Int32, {B, H, groups, 2});
    ATTENTION_RETURN_IF_ERROR(run_mod_kernel(mod, kernels.key_ranges, t, arguments));
  }
  return run_mod_kernel(mod, kernel, t, arguments);
}

}  // namespace

Status mod_attention(const ModKernels& kernels, const TensorView& q, const TensorView& k,
                     const TensorView& v, const TensorView& out,
                     const std::vector<ModArgument>& arguments, const SdpaOptions& options) {
  const char* mod = kernels.mod != nullptr ? kernels.mod : "(unnamed)";
  if (kernels.prefill.argv == nullptr || kernels.prefill.metadata == nullptr ||
      kernels.prefill.name == nullptr) {
    return Status::invalid(std::string("kernels: mod ") + mod + " has no prefill kernel");
  }
  const bool has_decode = kernels.decode.argv != nullptr;
  if (has_decode && (kernels.decode.metadata == nullptr || kernels.decode.name == nullptr)) {
    return Status::invalid(std::string("kernels: mod ") + mod + " decode kernel has no metadata");
  }
  if (!options.mask.empty()) {
    return Status::error(StatusCode::Unsupported,
                         "options.mask: a mod kernel masks what its mod says (write causal, "
                         "padding or windows into the mod)");
  }
  // Every kernel of the set for one backend: the prefill kernel's.
  const detail::Run target = kernel_run(kernels.prefill);
  for (const ModKernel* other : {&kernels.decode, &kernels.key_ranges}) {
    if (other->metadata == nullptr || kernel_run(*other) == target) continue;
    return Status::invalid(
        std::string("kernels: mod ") + mod + " mixes backends: " + kernels.prefill.name +
        " is for " + run_name(target) + ", " + (other->name ? other->name : "another kernel") +
        " for " + run_name(kernel_run(*other)));
  }
  // Backend::Auto runs GPU kernels on their backend, host tensors copied in and out.
  SdpaOptions resolved = detail::without_absent_logsumexp(options);
  if (options.backend == Backend::Auto && target != detail::Run::CPU) {
    resolved.backend = target == detail::Run::CUDA ? Backend::CUDA : Backend::OpenCL;
  }
  detail::Run run = detail::Run::CPU;
  ATTENTION_RETURN_IF_ERROR(detail::check_sdpa_call(q, k, v, out, resolved, &run));
  if (run != target) {
    return Status::error(StatusCode::Unsupported,
                         std::string("backend: the call runs on ") + run_name(run) + ", and mod " +
                             mod + "'s kernels were generated for " + run_name(target) + " (" +
                             kernels.prefill.metadata()->target +
                             "): generate them for that backend (attention_add_mod_library "
                             "TARGETS)");
  }
  if (run != detail::Run::CPU) {
    return gpu_mod_attention(mod, kernels, run, q, k, v, out, arguments, resolved);
  }
  const int64_t B = q.shape[0], Sq = q.shape[2];
  const int64_t Hkv = k.shape[1], Sk = k.shape[2];
  const detail::CpuKernelInfo& info = detail::cpu_kernel_info();
  const attention_contract::KernelChoice choice =
      has_decode ? attention_contract::choose_cpu_kernel(B, Hkv, Sq, Sk, info.prefill, info.decode)
                 : attention_contract::KernelChoice{
                       true, attention_contract::prefill_key_split(Sk, info.prefill)};
  const ModKernel& kernel = choice.prefill ? kernels.prefill : kernels.decode;
  ATTENTION_RETURN_IF_ERROR(
      check_mod_arguments(mod, *kernel.metadata(), arguments, out, Device::CPU));
  if (out.numel() == 0) return Status::ok_status();
  // Float16 / BFloat16 operands (validated above): widened exactly into fp32 scratch for the fp32
  // mod kernels, and the result rounded into out once; out is untouched until then.
  if (detail::is_half(q.dtype) || detail::is_half(k.dtype) || detail::is_half(v.dtype) ||
      detail::is_half(out.dtype)) {
    detail::Fp32Input wq, wk, wv;
    detail::Fp32Output result;
    ATTENTION_RETURN_IF_ERROR(result.stage(out));
    ATTENTION_RETURN_IF_ERROR(wq.widen(q));
    ATTENTION_RETURN_IF_ERROR(wk.widen(k));
    ATTENTION_RETURN_IF_ERROR(wv.widen(v));
    ATTENTION_RETURN_IF_ERROR(run_mod_cpu(mod, kernels, kernel, choice, wq.view(), wk.view(),
                                          wv.view(), result.view(), arguments, options));
    return result.finish();
  }
  return run_mod_cpu(mod, kernels, kernel, choice, q, k, v, out, arguments, options);
}

}  // namespace attention
