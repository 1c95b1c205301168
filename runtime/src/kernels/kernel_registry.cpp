// Kernel libraries generated at the application's build time (attention/kernel_library.h): checked
// against the built-in kernels they stand in for, then published as new CPU rows. Rows are never
// freed or changed once published, so a call that picked a kernel keeps a valid one whatever is
// registered meanwhile.
#include <HalideRuntime.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attention/kernel_library.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_slots.h"
#include "kernels/kernel_table.h"
#include "sdpa_bf16kv_decode.h"
#include "sdpa_bf16kv_masked_decode.h"
#include "sdpa_f16kv_decode.h"
#include "sdpa_f16kv_masked_decode.h"

namespace attention {
namespace detail {
namespace {

// A role a generated kernel can take: the built-in kernel it replaces, that kernel's signature
// (its metadata), the tiling it runs with, and where it goes in the rows.
struct Role {
  const char* name;
  const halide_filter_metadata_t* (*builtin_metadata)();
  bool prefill;  // the prefill tiling (else decode)
  void (*install)(CpuRows& rows, void (*fn)(), const char* name);
};

template <typename Fn>
void set_slot(KernelSlot<Fn>& slot, void (*fn)(), const char* name) {
  // The metadata check has shown fn has exactly this slot's signature.
  slot = {reinterpret_cast<Fn>(fn), name};
}

const Role kRoles[] = {
    {"sdpa_f32_prefill", sdpa_f32_prefill_metadata, true,
     [](CpuRows& r, void (*fn)(), const char* n) {
       set_slot(r.sdpa.plain.prefill, fn, n);
       r.builtin_plain = false;
     }},
    {"sdpa_f32_decode", sdpa_f32_decode_metadata, false,
     [](CpuRows& r, void (*fn)(), const char* n) {
       set_slot(r.sdpa.plain.decode, fn, n);
       r.builtin_plain = false;
     }},
    {"sdpa_f32_masked_prefill", sdpa_f32_masked_prefill_metadata, true,
     [](CpuRows& r, void (*fn)(), const char* n) {
       set_slot(r.sdpa.masked.prefill, fn, n);
       r.builtin_masked = false;
     }},
    {"sdpa_f32_masked_decode", sdpa_f32_masked_decode_metadata, false,
     [](CpuRows& r, void (*fn)(), const char* n) {
       set_slot(r.sdpa.masked.decode, fn, n);
       r.builtin_masked = false;
     }},
    {"sdpa_f16kv_decode", sdpa_f16kv_decode_metadata, false,
     [](CpuRows& r, void (*fn)(), const char* n) { set_slot(r.f16kv.plain, fn, n); }},
    {"sdpa_f16kv_masked_decode", sdpa_f16kv_masked_decode_metadata, false,
     [](CpuRows& r, void (*fn)(), const char* n) { set_slot(r.f16kv.masked, fn, n); }},
    {"sdpa_bf16kv_decode", sdpa_bf16kv_decode_metadata, false,
     [](CpuRows& r, void (*fn)(), const char* n) { set_slot(r.bf16kv.plain, fn, n); }},
    {"sdpa_bf16kv_masked_decode", sdpa_bf16kv_masked_decode_metadata, false,
     [](CpuRows& r, void (*fn)(), const char* n) { set_slot(r.bf16kv.masked, fn, n); }},
    {"mha_f32", mha_f32_metadata, true,
     [](CpuRows& r, void (*fn)(), const char* n) { set_slot(r.mha.plain, fn, n); }},
    {"mha_f32_masked", mha_f32_masked_metadata, true,
     [](CpuRows& r, void (*fn)(), const char* n) { set_slot(r.mha.masked, fn, n); }},
};

const Role* find_role(const char* name) {
  for (const Role& role : kRoles) {
    if (name != nullptr && std::strcmp(role.name, name) == 0) return &role;
  }
  return nullptr;
}

std::string type_name(const halide_type_t& t) {
  const char* code = t.code == halide_type_int      ? "int"
                     : t.code == halide_type_uint   ? "uint"
                     : t.code == halide_type_float  ? "float"
                     : t.code == halide_type_bfloat ? "bfloat"
                                                    : "handle";
  return code + std::to_string(t.bits) + (t.lanes > 1 ? "x" + std::to_string(t.lanes) : "");
}

// "" when `generated` takes the arguments `builtin` takes, else what differs.
std::string signature_difference(const halide_filter_metadata_t& generated,
                                 const halide_filter_metadata_t& builtin) {
  if (generated.num_arguments != builtin.num_arguments) {
    return std::to_string(generated.num_arguments) + " arguments, expected " +
           std::to_string(builtin.num_arguments);
  }
  for (int i = 0; i < builtin.num_arguments; ++i) {
    const halide_filter_argument_t& g = generated.arguments[i];
    const halide_filter_argument_t& b = builtin.arguments[i];
    const bool same = std::strcmp(g.name, b.name) == 0 && g.kind == b.kind &&
                      g.dimensions == b.dimensions && g.type.code == b.type.code &&
                      g.type.bits == b.type.bits && g.type.lanes == b.type.lanes;
    if (!same) {
      return "argument " + std::to_string(i) + " is " + g.name + " (" + type_name(g.type) + ", " +
             std::to_string(g.dimensions) + " dims), expected " + b.name + " (" +
             type_name(b.type) + ", " + std::to_string(b.dimensions) + " dims)";
    }
  }
  return "";
}

std::vector<std::string> split_targets(const char* targets) {
  std::vector<std::string> result;
  std::string current;
  for (const char* c = targets; *c != '\0'; ++c) {
    if (*c == ' ') {
      if (!current.empty()) result.push_back(current);
      current.clear();
    } else {
      current += *c;
    }
  }
  if (!current.empty()) result.push_back(current);
  return result;
}

// What a registration publishes: the rows and the tilings of every registered kernel so far.
// Immutable once published, so the calls read both without a lock.
struct Published {
  CpuRows rows;
  std::map<std::string, CpuTiling, std::less<>> tilings;  // by generated function name
};

struct Registry {
  std::mutex mutex;
  std::vector<const GeneratedKernelLibrary*> pending;
  std::atomic<bool> has_pending{false};
  struct Entry {
    const GeneratedKernelLibrary* library;
    Status status;
    std::string target;  // the library's target this CPU runs (its probe's answer)
  };
  std::vector<Entry> libraries;
  std::vector<std::unique_ptr<const Published>> published;  // every one ever published, kept
  std::atomic<const Published*> current{nullptr};
};

// A function-local static: generated registration code runs during static initialisation.
Registry& registry() {
  static Registry r;
  return r;
}

// Checks `library` and publishes its kernels (with r.mutex held).
Status register_locked(Registry& r, const GeneratedKernelLibrary& library) {
  const std::string name = library.name != nullptr ? library.name : "";
  for (const Registry::Entry& entry : r.libraries) {
    if (entry.library == &library) return entry.status;
    if (entry.library->name != nullptr && name == entry.library->name) {
      return Status::invalid("kernel library " + name +
                             ": another library of that name is already registered");
    }
  }
  std::string picked_target;
  const auto check = [&]() -> Status {
    const std::string prefix = "kernel library " + name + ": ";
    if (library.abi != kKernelLibraryAbi) {
      return Status::invalid(prefix + "generated for kernel library ABI " +
                             std::to_string(library.abi) + ", this runtime has ABI " +
                             std::to_string(kKernelLibraryAbi) +
                             " (regenerate it with this version's attention-gen)");
    }
    const std::vector<std::string> targets =
        library.targets != nullptr ? split_targets(library.targets) : std::vector<std::string>{};
    if (targets.empty() || library.kernel_info == nullptr ||
        (library.count > 0 && library.kernels == nullptr)) {
      return Status::invalid(prefix + "no targets, kernel_info or kernels");
    }
    // The variant Halide's dispatch picks here: the library's probe ends with the bare
    // <arch>-<bits>-<os> target, which it reports when this CPU runs none of the library's.
    const CpuKernelInfo info = read_kernel_info(library.kernel_info);
    const std::vector<std::string> picked = target_features(info.target);
    for (const std::string& target : targets) {
      if (picked_target.empty() && target_features(target) == picked) picked_target = target;
    }
    if (picked_target.empty()) {
      return Status::error(StatusCode::Unsupported, prefix + "this CPU has none of its targets (" +
                                                        library.targets + "); it runs " +
                                                        cpu_kernel_info().target);
    }
    const Published* current = r.current.load();
    auto next = current != nullptr ? std::make_unique<Published>(*current)
                                   : std::make_unique<Published>(Published{builtin_cpu_rows(), {}});
    for (size_t i = 0; i < library.count; ++i) {
      const GeneratedKernel& kernel = library.kernels[i];
      const Role* role = find_role(kernel.role);
      if (role == nullptr) {
        return Status::invalid(prefix + "unknown role " +
                               (kernel.role != nullptr ? kernel.role : "(null)") + " of kernel " +
                               std::to_string(i));
      }
      if (kernel.function == nullptr || kernel.metadata == nullptr ||
          kernel.function_name == nullptr) {
        return Status::invalid(prefix + "kernel " + role->name + " has no function or metadata");
      }
      const std::string difference =
          signature_difference(*kernel.metadata(), *role->builtin_metadata());
      if (!difference.empty()) {
        return Status::invalid(prefix + kernel.function_name + " cannot stand in for " +
                               role->name + ": " + difference);
      }
      role->install(next->rows, kernel.function, kernel.function_name);
      next->tilings[kernel.function_name] =
          tiling_with_params(role->prefill ? info.prefill : info.decode,
                             kernel.params != nullptr ? kernel.params : "");
    }
    r.published.push_back(std::move(next));
    r.current.store(r.published.back().get());
    return Status::ok_status();
  };
  Status status = check();
  if (!status.ok()) picked_target.clear();
  r.libraries.push_back({&library, status, picked_target});
  return status;
}

// The registry after registering the libraries that asked to be at their first use.
Registry& settled_registry() {
  Registry& r = registry();
  if (r.has_pending.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const GeneratedKernelLibrary* library : r.pending) register_locked(r, *library);
    r.pending.clear();
    r.has_pending.store(false);
  }
  return r;
}

}  // namespace

bool register_kernel_library_at_first_use(const GeneratedKernelLibrary* library) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.pending.push_back(library);
  r.has_pending.store(true);
  return true;
}

const CpuRows& cpu_rows() {
  const Published* current = settled_registry().current.load(std::memory_order_acquire);
  return current != nullptr ? current->rows : builtin_cpu_rows();
}

const CpuTiling* registered_kernel_tiling(std::string_view kernel) {
  const Published* current = registry().current.load(std::memory_order_acquire);
  if (current == nullptr) return nullptr;
  const auto found = current->tilings.find(kernel);
  return found != current->tilings.end() ? &found->second : nullptr;
}

}  // namespace detail

Status register_kernel_library(const GeneratedKernelLibrary& library) {
  detail::Registry& r = detail::settled_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return detail::register_locked(r, library);
}

std::vector<KernelLibraryInfo> kernel_libraries() {
  detail::Registry& r = detail::settled_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<KernelLibraryInfo> result;
  for (const detail::Registry::Entry& entry : r.libraries) {
    const GeneratedKernelLibrary& library = *entry.library;
    std::vector<std::string> kernels;
    for (size_t i = 0; i < library.count && library.kernels != nullptr; ++i) {
      const char* kernel = library.kernels[i].function_name;
      kernels.push_back(kernel != nullptr ? kernel : "");
    }
    result.push_back({library.name != nullptr ? library.name : "",
                      library.targets != nullptr ? library.targets : "", entry.target,
                      std::move(kernels), entry.status});
  }
  return result;
}

std::string mha_kernel_name(bool masked) {
  const detail::CpuRows& rows = detail::cpu_rows();
  return masked ? rows.mha.masked.name : rows.mha.plain.name;
}

}  // namespace attention
