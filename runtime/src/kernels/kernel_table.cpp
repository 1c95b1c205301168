#include "kernels/kernel_table.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "kernels/kernel_choice.h"
#include "kernels/kernel_slots.h"
#if ATTENTION_BF16_PREFILL
#include <cpuid.h>

#include "sdpa_bf16_prefill.h"
#endif
#include "sdpa_bf16kv_decode.h"
#include "sdpa_bf16kv_masked_decode.h"
#include "sdpa_bf16kv_paged_decode.h"
#include "sdpa_bf16kv_paged_whole_decode.h"
#include "sdpa_f16kv_decode.h"
#include "sdpa_f16kv_masked_decode.h"
#include "sdpa_f16kv_paged_decode.h"
#include "sdpa_f16kv_paged_whole_decode.h"
#include "sdpa_f32_paged_whole_decode.h"
#if ATTENTION_GPU
#include "mha_f32_cuda.h"
#include "mha_f32_masked_cuda.h"
#include "mha_f32_masked_opencl.h"
#include "mha_f32_opencl.h"
#include "sdpa_bf16kv_decode_cuda.h"
#include "sdpa_bf16kv_decode_opencl.h"
#include "sdpa_bf16kv_masked_decode_cuda.h"
#include "sdpa_bf16kv_masked_decode_opencl.h"
#include "sdpa_bf16kv_paged_decode_cuda.h"
#include "sdpa_bf16kv_paged_decode_opencl.h"
#include "sdpa_f16kv_decode_cuda.h"
#include "sdpa_f16kv_decode_opencl.h"
#include "sdpa_f16kv_masked_decode_cuda.h"
#include "sdpa_f16kv_masked_decode_opencl.h"
#include "sdpa_f16kv_paged_decode_cuda.h"
#include "sdpa_f16kv_paged_decode_opencl.h"
#include "sdpa_f32_decode_cuda.h"
#include "sdpa_f32_decode_opencl.h"
#include "sdpa_f32_masked_decode_cuda.h"
#include "sdpa_f32_masked_decode_opencl.h"
#include "sdpa_f32_masked_prefill_cuda.h"
#include "sdpa_f32_masked_prefill_opencl.h"
#include "sdpa_f32_paged_decode_cuda.h"
#include "sdpa_f32_paged_decode_opencl.h"
#include "sdpa_f32_prefill_cuda.h"
#include "sdpa_f32_prefill_opencl.h"
#endif
#include "attention_tuned_kernels.inc"

namespace attention::detail {
namespace {

#define ATTENTION_SLOT(kernel) \
  { kernel, #kernel }

const CpuRows kBuiltinCpu{
    {{ATTENTION_SLOT(sdpa_f32_prefill), ATTENTION_SLOT(sdpa_f32_decode)},
     {ATTENTION_SLOT(sdpa_f32_masked_prefill), ATTENTION_SLOT(sdpa_f32_masked_decode)}},
    {ATTENTION_SLOT(mha_f32), ATTENTION_SLOT(mha_f32_masked)},
    {ATTENTION_SLOT(sdpa_f16kv_decode), ATTENTION_SLOT(sdpa_f16kv_masked_decode)},
    {ATTENTION_SLOT(sdpa_bf16kv_decode), ATTENTION_SLOT(sdpa_bf16kv_masked_decode)}};
#if ATTENTION_GPU
const SdpaRow kSdpaCuda{
    {ATTENTION_SLOT(sdpa_f32_prefill_cuda), ATTENTION_SLOT(sdpa_f32_decode_cuda)},
    {ATTENTION_SLOT(sdpa_f32_masked_prefill_cuda), ATTENTION_SLOT(sdpa_f32_masked_decode_cuda)}};
const SdpaRow kSdpaOpenCl{
    {ATTENTION_SLOT(sdpa_f32_prefill_opencl), ATTENTION_SLOT(sdpa_f32_decode_opencl)},
    {ATTENTION_SLOT(sdpa_f32_masked_prefill_opencl),
     ATTENTION_SLOT(sdpa_f32_masked_decode_opencl)}};
// Per backend: the f16 and bf16 KV caches' decode kernels (raw 16-bit k and v).
const HalfKvDecodeRow kHalfKvCuda[] = {
    {ATTENTION_SLOT(sdpa_f16kv_decode_cuda), ATTENTION_SLOT(sdpa_f16kv_masked_decode_cuda)},
    {ATTENTION_SLOT(sdpa_bf16kv_decode_cuda), ATTENTION_SLOT(sdpa_bf16kv_masked_decode_cuda)}};
const HalfKvDecodeRow kHalfKvOpenCl[] = {
    {ATTENTION_SLOT(sdpa_f16kv_decode_opencl), ATTENTION_SLOT(sdpa_f16kv_masked_decode_opencl)},
    {ATTENTION_SLOT(sdpa_bf16kv_decode_opencl), ATTENTION_SLOT(sdpa_bf16kv_masked_decode_opencl)}};
// The half-KV decode rows of a GPU run: [0] Float16, [1] BFloat16.
const HalfKvDecodeRow* gpu_half_kv_rows(Run run) {
  return run == Run::CUDA ? kHalfKvCuda : kHalfKvOpenCl;
}
const MhaRow kMhaCuda{ATTENTION_SLOT(mha_f32_cuda), ATTENTION_SLOT(mha_f32_masked_cuda)};
const MhaRow kMhaOpenCl{ATTENTION_SLOT(mha_f32_opencl), ATTENTION_SLOT(mha_f32_masked_opencl)};
#endif
const TilingPair<decltype(&additive_f32_prefill)> kAdditive{ATTENTION_SLOT(additive_f32_prefill),
                                                            ATTENTION_SLOT(additive_f32_decode)};
const TilingPair<decltype(&nadaraya_watson_f32_prefill)> kNadarayaWatson{
    ATTENTION_SLOT(nadaraya_watson_f32_prefill), ATTENTION_SLOT(nadaraya_watson_f32_decode)};

// Per backend: the paged decode kernels of Float32, Float16 and BFloat16 caches.
using PagedSlot = KernelSlot<decltype(&sdpa_f32_paged_decode)>;
const PagedSlot kPagedDecode[] = {ATTENTION_SLOT(sdpa_f32_paged_decode),
                                  ATTENTION_SLOT(sdpa_f16kv_paged_decode),
                                  ATTENTION_SLOT(sdpa_bf16kv_paged_decode)};
// The CPU's whole-split variants (paged_sdpa with whole_keys=true).
const PagedSlot kPagedWholeDecode[] = {ATTENTION_SLOT(sdpa_f32_paged_whole_decode),
                                       ATTENTION_SLOT(sdpa_f16kv_paged_whole_decode),
                                       ATTENTION_SLOT(sdpa_bf16kv_paged_whole_decode)};
#if ATTENTION_GPU
const PagedSlot kPagedDecodeCuda[] = {ATTENTION_SLOT(sdpa_f32_paged_decode_cuda),
                                      ATTENTION_SLOT(sdpa_f16kv_paged_decode_cuda),
                                      ATTENTION_SLOT(sdpa_bf16kv_paged_decode_cuda)};
const PagedSlot kPagedDecodeOpenCl[] = {ATTENTION_SLOT(sdpa_f32_paged_decode_opencl),
                                        ATTENTION_SLOT(sdpa_f16kv_paged_decode_opencl),
                                        ATTENTION_SLOT(sdpa_bf16kv_paged_decode_opencl)};
#endif
const PagedSlot* paged_rows(Run run) {
#if ATTENTION_GPU
  if (run == Run::CUDA) return kPagedDecodeCuda;
  if (run == Run::OpenCL) return kPagedDecodeOpenCl;
#endif
  (void)run;
  return kPagedDecode;
}

// A paged row's slot for a cache of `kv`: Float32, Float16, BFloat16.
size_t paged_slot(DType kv) { return kv == DType::Float16 ? 1 : kv == DType::BFloat16 ? 2 : 0; }

const KernelSlot<decltype(&sdpa_f32_rope_prefill)> kRopePrefill =
    ATTENTION_SLOT(sdpa_f32_rope_prefill);

#if ATTENTION_BF16_PREFILL
const KernelSlot<decltype(&sdpa_f32_prefill)> kBf16Prefill = ATTENTION_SLOT(sdpa_bf16_prefill);
#endif

#undef ATTENTION_SLOT

// Each list ends with an empty row (a table may have no tuned kernel of a family).
const TunedSlot<decltype(&sdpa_f32_prefill)> kTunedPlain[] = {
#include "attention_tuned_plain.inc"
    {{nullptr, nullptr}, nullptr, nullptr}};
const TunedSlot<decltype(&sdpa_f32_masked_prefill)> kTunedMasked[] = {
#include "attention_tuned_masked.inc"
    {{nullptr, nullptr}, nullptr, nullptr}};

std::atomic<bool> tuned_enabled{[] {
  const char* env = std::getenv("ATTENTION_TUNED");
  return env == nullptr || std::strcmp(env, "0") != 0;
}()};

// Whether a Halide target string names the variant that runs here: the same features in any order
// (the build writes targets as listed, kernel_info as Halide prints them).
bool runs_here(std::string_view target) {
  static const std::vector<std::string> here = target_features(cpu_kernel_info().target);
  return target_features(target) == here;
}

// The rows of `table` whose target runs here (fixed for the process: the CPU does not change).
template <typename Fn, size_t N>
const std::vector<const TunedSlot<Fn>*>& tuned_here(const TunedSlot<Fn> (&table)[N]) {
  static const std::vector<const TunedSlot<Fn>*> rows = [&] {
    std::vector<const TunedSlot<Fn>*> result;
    for (const TunedSlot<Fn>& row : table) {
      if (row.target != nullptr && runs_here(row.target)) result.push_back(&row);
    }
    return result;
  }();
  return rows;
}

template <typename Fn, size_t N>
const KernelSlot<Fn>* find_tuned(const TunedSlot<Fn> (&table)[N], std::string_view bucket) {
  if (!tuned_enabled.load(std::memory_order_relaxed)) return nullptr;
  for (const TunedSlot<Fn>* row : tuned_here(table)) {
    if (bucket == row->bucket) return &row->slot;
  }
  return nullptr;
}

const KernelBuild kBuilds[] = {
#include "attention_kernel_builds.inc"
};

std::vector<Run> backends() {
#if ATTENTION_GPU
  return {Run::CPU, Run::CUDA, Run::OpenCL};
#else
  return {Run::CPU};
#endif
}

// The GPU API a kernel was built for, none for a CPU kernel.
std::optional<attention_contract::GpuApi> gpu_api_of(const KernelBuild& build) {
  return gpu_api_of_target(build.targets);
}

bool builds_prefill(const KernelBuild& build) {
  return build_param(build, "query_tiling") != "decode";
}

// `base` with the tiling parameters the build gave the kernel.
template <typename Tiling, typename Param, size_t N>
Tiling with_build_params(const Tiling& base, const KernelBuild& build, const Param (&params)[N]) {
  std::array<int, N> values{};
  for (size_t i = 0; i < N; ++i) {
    const std::string value = build_param(build, params[i].name);
    values[i] = value.empty() ? 0 : std::atoi(value.c_str());
  }
  return attention_contract::with_overrides(base, values);
}

}  // namespace

const char* backend_name(Run run) {
  return run == Run::CUDA ? "cuda" : run == Run::OpenCL ? "opencl" : "cpu";
}

const char* gpu_sdpa_kernel_name(Run run, bool masked, int64_t Sq) {
  const SdpaRow& row = sdpa_row(run);
  const auto name = [Sq](const auto& pair) {
    return pair[choose_gpu_kernel(pair.prefill.name, pair.decode.name, Sq)].name;
  };
  return masked ? name(row.masked) : name(row.plain);
}

const CpuRows& builtin_cpu_rows() { return kBuiltinCpu; }

std::vector<std::string> target_features(std::string_view target) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= target.size()) {
    size_t end = target.find('-', start);
    if (end == std::string_view::npos) end = target.size();
    std::string part(target.substr(start, end - start));
    // A sanitizer build's asan is on every kernel alike and says nothing of the ISA; the others
    // are build-only features.
    if (part != "asan" && part != "user_context" && part != "no_runtime" &&
        part != "c_plus_plus_name_mangling") {
      parts.push_back(std::move(part));
    }
    start = end + 1;
  }
  std::sort(parts.begin(), parts.end());
  return parts;
}

CpuTiling tiling_with_params(const CpuTiling& base, const char* params) {
  const KernelBuild build{"", "", params, ""};
  return with_build_params(base, build, attention_contract::kCpuTilingParams);
}

const SdpaRow& sdpa_row(Run run) {
#if ATTENTION_GPU
  if (run == Run::CUDA) return kSdpaCuda;
  if (run == Run::OpenCL) return kSdpaOpenCl;
#endif
  (void)run;
  return cpu_rows().sdpa;
}

const MhaRow& mha_row(Run run) {
#if ATTENTION_GPU
  if (run == Run::CUDA) return kMhaCuda;
  if (run == Run::OpenCL) return kMhaOpenCl;
#endif
  (void)run;
  return cpu_rows().mha;
}

const TilingPair<decltype(&additive_f32_prefill)>& additive_row() { return kAdditive; }

const KernelSlot<decltype(&sdpa_f32_paged_decode)>& paged_decode_kernel(Run run, DType kv) {
  return paged_rows(run)[paged_slot(kv)];
}

const KernelSlot<decltype(&sdpa_f32_paged_decode)>& paged_whole_decode_kernel(DType kv) {
  return kPagedWholeDecode[paged_slot(kv)];
}

const KernelSlot<decltype(&sdpa_f32_rope_prefill)>& rope_prefill_kernel() { return kRopePrefill; }

const HalfKvDecodeRow* half_kv_decode_row(DType kv) {
  const CpuRows& rows = cpu_rows();
  return kv == DType::Float16 ? &rows.f16kv : kv == DType::BFloat16 ? &rows.bf16kv : nullptr;
}

const HalfKvDecodeRow* half_kv_decode(DType kv, DType v, bool masked, int64_t B, int64_t Hkv,
                                      int64_t Sq, int64_t Sk, KernelChoice* choice) {
  const HalfKvDecodeRow* row = half_kv_decode_row(kv);
  if (row == nullptr || v != kv || Sk == 0) return nullptr;
  const SdpaRow& fp32 = cpu_rows().sdpa;
  const char* prefill = masked ? fp32.masked.prefill.name : fp32.plain.prefill.name;
  const char* decode = masked ? row->masked.name : row->plain.name;
  *choice = choose_kernel(prefill, decode, B, Hkv, Sq, Sk);
  return choice->prefill ? nullptr : row;
}

const HalfKvDecodeRow* gpu_half_kv_decode(Run run, DType kv, DType v, int64_t Sq, int64_t Sk) {
#if ATTENTION_GPU
  const bool half = kv == DType::Float16 || kv == DType::BFloat16;
  if (run == Run::CPU || v != kv || !half || Sk == 0) return nullptr;
  const SdpaRow& fp32 = sdpa_row(run);
  if (choose_gpu_kernel(fp32.plain.prefill.name, fp32.plain.decode.name, Sq).prefill)
    return nullptr;
  return &gpu_half_kv_rows(run)[kv == DType::Float16 ? 0 : 1];
#else
  (void)run, (void)kv, (void)v, (void)Sq, (void)Sk;
  return nullptr;
#endif
}

const KernelSlot<decltype(&sdpa_f32_prefill)>* bf16_prefill_kernel() {
#if ATTENTION_BF16_PREFILL && defined(__x86_64__)
  // Every extension LLVM may use under the kernel's target, by CPUID leaf 7: AVX-512 F, DQ, IFMA,
  // CD, BW, VL (subleaf 0, ebx), VBMI, VBMI2, VNNI, BITALG (ecx), BF16 (subleaf 1, eax bit 5).
  // Halide's own check knows nothing of avx512_zen4 (it would pass an Ice Lake), hence these.
  static const bool has_bf16 = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const unsigned ebx =
        (1u << 16) | (1u << 17) | (1u << 21) | (1u << 28) | (1u << 30) | (1u << 31);
    const unsigned ecx = (1u << 1) | (1u << 6) | (1u << 11) | (1u << 12);
    if ((b & ebx) != ebx || (c & ecx) != ecx) return false;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) != 0;
  }();
  if (!has_bf16) return nullptr;
  constexpr int kWords = (halide_target_feature_end + 63) / 64;
  uint64_t features[kWords] = {};
  for (int f : {halide_target_feature_sse41, halide_target_feature_avx, halide_target_feature_f16c,
                halide_target_feature_fma, halide_target_feature_avx2, halide_target_feature_avx512,
                halide_target_feature_avx512_skylake, halide_target_feature_avx512_cannonlake,
                halide_target_feature_avx512_zen4}) {
    features[f / 64] |= uint64_t(1) << (f % 64);
  }
  return halide_can_use_target_features(kWords, features) ? &kBf16Prefill : nullptr;
#else
  return nullptr;
#endif
}

const KernelSlot<decltype(&sdpa_f32_prefill)>* bf16_prefill_for(DType q, DType k, DType v,
                                                                DType out, bool masked, int64_t Sq,
                                                                int64_t Sk, int64_t D) {
  for (DType t : {q, k, v, out}) {
    if (t != DType::BFloat16) return nullptr;
  }
  if (masked || !attention_contract::use_prefill(Sq) || Sk == 0 || D % 2 != 0) return nullptr;
  return bf16_prefill_kernel();
}

const char* shape_bucket_name(int64_t Sq, int64_t Sk, int64_t D, bool masked) {
  using namespace attention_contract;
  // One shape of each bucket: Sq in {1, kLongQueries - 1, kLongQueries}, Sk and D either side.
  static const std::array<std::string, 24> names = [] {
    std::array<std::string, 24> n;
    for (int i = 0; i < 24; ++i) {
      const int64_t sq = i / 8 == 0 ? 1 : i / 8 == 1 ? kLongQueries - 1 : kLongQueries;
      n[i] = shape_bucket(sq, i / 4 % 2 ? kLongKeys : 1, i / 2 % 2 ? kSmallHeadDim + 1 : 1, i % 2);
    }
    return n;
  }();
  const int variant = !use_prefill(Sq) ? 0 : Sq < kLongQueries ? 1 : 2;
  return names[variant * 8 + (Sk >= kLongKeys) * 4 + (D > kSmallHeadDim) * 2 + masked].c_str();
}

const KernelSlot<decltype(&sdpa_f32_prefill)>* tuned_sdpa(std::string_view bucket) {
  return find_tuned(kTunedPlain, bucket);
}

const KernelSlot<decltype(&sdpa_f32_masked_prefill)>* tuned_masked_sdpa(std::string_view bucket) {
  return find_tuned(kTunedMasked, bucket);
}

std::vector<std::pair<std::string, std::string>> tuned_kernels_here() {
  std::vector<std::pair<std::string, std::string>> result;
  for (const auto* row : tuned_here(kTunedPlain)) result.emplace_back(row->bucket, row->slot.name);
  for (const auto* row : tuned_here(kTunedMasked)) result.emplace_back(row->bucket, row->slot.name);
  return result;
}

std::string cpu_sdpa_kernel(bool masked, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D) {
  const CpuRows& rows = cpu_rows();
  return masked ? pick_masked_sdpa(rows, B, H, Sq, Sk, D).kernel.name
                : pick_sdpa(rows, B, H, Sq, Sk, D).kernel.name;
}

void set_tuned_enabled(bool enabled) { tuned_enabled.store(enabled); }
bool tuned_enabled_now() { return tuned_enabled.load(); }

const TilingPair<decltype(&nadaraya_watson_f32_prefill)>& nadaraya_watson_row() {
  return kNadarayaWatson;
}

const KernelBuild* find_kernel_build(std::string_view name) {
  for (const KernelBuild& build : kBuilds) {
    if (name == build.name) return &build;
  }
  return nullptr;
}

std::string build_param(const KernelBuild& build, std::string_view key) {
  const std::string_view params = build.params;
  size_t start = 0;
  while (start < params.size()) {
    size_t end = params.find(' ', start);
    if (end == std::string_view::npos) end = params.size();
    const std::string_view item = params.substr(start, end - start);
    if (item.size() > key.size() && item.substr(0, key.size()) == key && item[key.size()] == '=') {
      return std::string(item.substr(key.size() + 1));
    }
    start = end + 1;
  }
  return "";
}

const CpuTiling& kernel_cpu_tiling(std::string_view kernel) {
  static const std::map<std::string, CpuTiling, std::less<>> tilings = [] {
    const CpuKernelInfo& info = cpu_kernel_info();
    std::map<std::string, CpuTiling, std::less<>> result;
    for (const KernelBuild& build : kBuilds) {
      if (gpu_api_of(build)) continue;
      // The native bf16 prefill has its own tiling (one target: AVX-512, 16 lanes).
      const CpuTiling base = build_param(build, "q_type") == "bfloat16"
                                 ? attention_contract::cpu_pair_tiling(16)
                             : builds_prefill(build) ? info.prefill
                                                     : info.decode;
      result[build.name] = with_build_params(base, build, attention_contract::kCpuTilingParams);
    }
    return result;
  }();
  const auto found = tilings.find(kernel);
  if (found != tilings.end()) return found->second;
  const CpuTiling* registered = registered_kernel_tiling(kernel);
  return registered != nullptr ? *registered : cpu_kernel_info().prefill;
}

const GpuTiling& kernel_gpu_tiling(std::string_view kernel) {
  static const std::map<std::string, GpuTiling, std::less<>> tilings = [] {
    std::map<std::string, GpuTiling, std::less<>> result;
    for (const KernelBuild& build : kBuilds) {
      const auto api = gpu_api_of(build);
      if (!api) continue;
      const GpuTiling base = attention_contract::gpu_tiling(*api, builds_prefill(build));
      result[build.name] = with_build_params(base, build, attention_contract::kGpuTilingParams);
    }
    return result;
  }();
  // Unknown names never occur (the contract test checks every slot); the prefill default is safe.
  static const GpuTiling fallback =
      attention_contract::gpu_tiling(attention_contract::GpuApi::CUDA, true);
  const auto found = tilings.find(kernel);
  return found != tilings.end() ? found->second : fallback;
}

std::vector<KernelSlotInfo> kernel_slots() {
  std::vector<KernelSlotInfo> slots;
  for (Run run : backends()) {
    const std::string backend = backend_name(run);
    // The built-in kernels, whatever registered libraries serve now.
    const SdpaRow& sdpa = run == Run::CPU ? kBuiltinCpu.sdpa : sdpa_row(run);
    slots.push_back({"sdpa", backend, "prefill", sdpa.plain.prefill.name});
    slots.push_back({"sdpa", backend, "decode", sdpa.plain.decode.name});
    slots.push_back({"sdpa", backend, "masked_prefill", sdpa.masked.prefill.name});
    slots.push_back({"sdpa", backend, "masked_decode", sdpa.masked.decode.name});
    const MhaRow& mha = run == Run::CPU ? kBuiltinCpu.mha : mha_row(run);
    slots.push_back({"mha", backend, "plain", mha.plain.name});
    slots.push_back({"mha", backend, "masked", mha.masked.name});
  }
  for (const auto& [family, row] :
       {std::pair{"sdpa_f16kv", &kBuiltinCpu.f16kv}, {"sdpa_bf16kv", &kBuiltinCpu.bf16kv}}) {
    slots.push_back({family, "cpu", "decode", row->plain.name});
    slots.push_back({family, "cpu", "masked_decode", row->masked.name});
  }
#if ATTENTION_GPU
  for (Run run : {Run::CUDA, Run::OpenCL}) {
    const HalfKvDecodeRow* rows = gpu_half_kv_rows(run);
    for (const auto& [family, row] :
         {std::pair{"sdpa_f16kv", &rows[0]}, std::pair{"sdpa_bf16kv", &rows[1]}}) {
      slots.push_back({family, backend_name(run), "decode", row->plain.name});
      slots.push_back({family, backend_name(run), "masked_decode", row->masked.name});
    }
  }
#endif
#if ATTENTION_BF16_PREFILL
  slots.push_back({"sdpa_bf16", "cpu", "prefill", kBf16Prefill.name});
#endif
  slots.push_back({"sdpa_rope", "cpu", "masked_prefill", kRopePrefill.name});
  for (Run run : backends()) {
    const PagedSlot* paged = paged_rows(run);
    slots.push_back({"sdpa_paged", backend_name(run), "masked_decode", paged[0].name});
    slots.push_back({"sdpa_paged_f16kv", backend_name(run), "masked_decode", paged[1].name});
    slots.push_back({"sdpa_paged_bf16kv", backend_name(run), "masked_decode", paged[2].name});
  }
  slots.push_back({"sdpa_paged_whole", "cpu", "masked_decode", kPagedWholeDecode[0].name});
  slots.push_back({"sdpa_paged_whole_f16kv", "cpu", "masked_decode", kPagedWholeDecode[1].name});
  slots.push_back({"sdpa_paged_whole_bf16kv", "cpu", "masked_decode", kPagedWholeDecode[2].name});
  slots.push_back({"additive", "cpu", "masked_prefill", kAdditive.prefill.name});
  slots.push_back({"additive", "cpu", "masked_decode", kAdditive.decode.name});
  slots.push_back({"nadaraya_watson", "cpu", "prefill", kNadarayaWatson.prefill.name});
  slots.push_back({"nadaraya_watson", "cpu", "decode", kNadarayaWatson.decode.name});
  return slots;
}

}  // namespace attention::detail
