// Which generated kernel serves a call (prefill or decode) and how it splits the keys: the rules of
// generators/contract/kernel_contract.h, applied with the tilings of the kernels that run here.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "call/small_vector.h"
#include "execute/gpu.h"
#include "kernel_contract.h"

struct halide_buffer_t;

namespace attention::detail {

using attention_contract::CpuTiling;
using attention_contract::GpuTiling;
using attention_contract::KernelChoice;

// The CPU kernel variant Halide's multi-target dispatch picks on this machine, as the generated
// kernel_info kernel (built for the kernels' targets) reports it: its target string and the
// default tilings of that variant's prefill and decode schedules.
struct CpuKernelInfo {
  std::string target;
  CpuTiling prefill, decode;
};
const CpuKernelInfo& cpu_kernel_info();
// What a kernel_info kernel (generators/probe_generator.cpp) built for some list of targets
// reports: the built-in one above, or a generated kernel library's (kernel_registry.cpp).
using KernelInfoFn = int (*)(void const*, halide_buffer_t*, halide_buffer_t*);
CpuKernelInfo read_kernel_info(KernelInfoFn probe);

// The tiling generated kernel `kernel` runs with here: the default of its query tiling for the
// variant that runs (GPU: for its API), with the tiling parameters the build gave it
// (kernel_table.cpp reads them from the build's record).
const CpuTiling& kernel_cpu_tiling(std::string_view kernel);
const GpuTiling& kernel_gpu_tiling(std::string_view kernel);

// The GPU API a Halide target string names (its cuda or opencl feature), none for a CPU target.
inline std::optional<attention_contract::GpuApi> gpu_api_of_target(std::string_view target) {
  if (target.find("-cuda") != std::string_view::npos) return attention_contract::GpuApi::CUDA;
  if (target.find("-opencl") != std::string_view::npos) return attention_contract::GpuApi::OpenCL;
  return std::nullopt;
}

// A CPU call of Sq queries against Sk keys with B batches of Hkv kv heads (decode's work items
// cover a kv head's query heads), served by `prefill_kernel` or `decode_kernel`.
inline KernelChoice choose_kernel(std::string_view prefill_kernel, std::string_view decode_kernel,
                                  int64_t B, int64_t Hkv, int64_t Sq, int64_t Sk) {
  return attention_contract::choose_cpu_kernel(B, Hkv, Sq, Sk, kernel_cpu_tiling(prefill_kernel),
                                               kernel_cpu_tiling(decode_kernel));
}

// A tuned kernel serves only its bucket's calls, whose variant (prefill or decode) it was built as.
inline KernelChoice choose_tuned_kernel(std::string_view kernel, int64_t B, int64_t Hkv, int64_t Sq,
                                        int64_t Sk) {
  const CpuTiling& tiling = kernel_cpu_tiling(kernel);
  return attention_contract::choose_cpu_kernel(B, Hkv, Sq, Sk, tiling, tiling);
}

// The split of a kernel that always runs the prefill schedule (the MHA block).
inline int32_t prefill_key_split(std::string_view kernel, int64_t Sk) {
  return attention_contract::prefill_key_split(Sk, kernel_cpu_tiling(kernel));
}

// A CPU paged call's sequences in groups of similar cache length, each group one kernel call (its
// batch indices, longest first). A call's key splits are the same for every sequence and a work
// item computes its whole split, so a sequence costs about as much as the call's longest (a batch
// of one 512-key and seven 16-key sequences took two thirds of the time of eight 512-key ones).
// Lengths count in kSplitKeyMultiple keys, the least split: a sequence joins the current group
// while it holds more than half of the group's longest. One group, every index in order, when the
// groups would save less than a fifth of the units (each further call copies its q and output
// rows and spreads its own work over the threads).
// The groups: their batch indices one group after another, and where each group ends. Inline for
// the batches of common calls (a call allocates nothing).
class PagedLengthGroups {
 public:
  // One group's batch indices.
  struct Group {
    const int64_t* first;
    const int64_t* last;
    const int64_t* begin() const { return first; }
    const int64_t* end() const { return last; }
    bool empty() const { return first == last; }
    size_t size() const { return static_cast<size_t>(last - first); }
    int64_t operator[](size_t n) const { return first[n]; }
  };
  struct Iterator {
    const PagedLengthGroups* groups;
    size_t g;
    Group operator*() const { return (*groups)[g]; }
    Iterator& operator++() {
      ++g;
      return *this;
    }
    bool operator!=(const Iterator& other) const { return g != other.g; }
  };

  size_t size() const { return ends_.size(); }
  Group operator[](size_t g) const {
    const int64_t* base = order_.data();
    return {base + (g == 0 ? 0 : ends_[g - 1]), base + ends_[g]};
  }
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, size()}; }

  void add_group() { ends_.push_back(static_cast<int64_t>(order_.size())); }
  void add(int64_t b) {  // to the last group
    order_.push_back(b);
    ++ends_[ends_.size() - 1];
  }
  void clear() {
    order_.clear();
    ends_.clear();
  }

 private:
  SmallVector<int64_t, 64> order_;
  SmallVector<int64_t, 16> ends_;
};

template <typename Lengths>
PagedLengthGroups paged_length_groups(const Lengths& lengths) {
  const auto units = [](int64_t keys) {
    constexpr int64_t unit = attention_contract::kSplitKeyMultiple;
    return (std::max<int64_t>(keys, 1) + unit - 1) / unit;
  };
  const int64_t B = static_cast<int64_t>(lengths.size());
  SmallVector<int64_t, 64> order;
  for (int64_t b = 0; b < B; ++b) order.push_back(b);
  // Longest first, ties in batch order (std::stable_sort would allocate a buffer).
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return lengths[a] != lengths[b] ? lengths[a] > lengths[b] : a < b;
  });
  PagedLengthGroups groups;
  int64_t longest = 0, grouped = 0;  // the current group's units; every group's, padded
  for (int64_t b : order) {
    if (groups.size() == 0 || 2 * units(lengths[b]) <= longest) {
      groups.add_group();
      longest = units(lengths[b]);
    }
    groups.add(b);
    grouped += longest;
  }
  const int64_t padded = B * (B == 0 ? 0 : units(lengths[order[0]]));
  if (groups.size() > 1 && 5 * grouped > 4 * padded) {
    groups.clear();
    groups.add_group();
    for (int64_t b = 0; b < B; ++b) groups.add(b);
  }
  return groups;
}
inline PagedLengthGroups paged_length_groups(std::initializer_list<int64_t> lengths) {
  return paged_length_groups(std::vector<int64_t>(lengths));
}

// A GPU call: every split is the chosen kernel's split_keys (its register tiles have that shape).
inline KernelChoice choose_gpu_kernel(std::string_view prefill_kernel,
                                      std::string_view decode_kernel, int64_t Sq) {
  return attention_contract::choose_gpu_kernel(Sq, kernel_gpu_tiling(prefill_kernel),
                                               kernel_gpu_tiling(decode_kernel));
}

inline int32_t gpu_prefill_key_split(std::string_view kernel) {
  return kernel_gpu_tiling(kernel).split_keys;
}

// The bytes of device workspace a GPU call may take: gpu.workspace_limit, or the default for 0
// (negative limits were refused with the other arguments).
inline int64_t gpu_workspace_limit(const GpuOptions& gpu) {
  return gpu.workspace_limit > 0 ? gpu.workspace_limit : kDefaultGpuWorkspaceLimit;
}

// A GPU call's work in chunks whose split results (attention_contract::gpu_split_workspace_bytes)
// fit the caller's workspace limit: query rows [row, row + rows) of heads [head, head + heads) of
// batches [batch, batch + batches). Rows start at multiples of the query tile.
struct GpuChunk {
  int64_t batch, batches, head, heads, row, rows;
};

// The chunks of a call of B batches of H heads, Sq rows against Sk keys and Dv value features,
// served by a kernel of tiling `t`, within gpu.workspace_limit bytes (0: the default): one chunk
// when it all fits, else chunks of rows with every head, else chunks of batches or heads too.
// Chunks hold whole multiples of `head_unit` heads (a divisor of H): SDPA's GQA group (each
// chunk's k and v are then whole kv heads), multi_head_attention's H (its output projection mixes
// every head). An error names `option` (the call's GpuOptions) when even the smallest chunk does
// not fit.
Status plan_gpu_chunks(const GpuTiling& t, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t Dv,
                       const GpuOptions& gpu, const char* option, int64_t head_unit,
                       std::vector<GpuChunk>* chunks);

}  // namespace attention::detail
