// plan_sdpa: the candidates of sdpa_plan.h in order, each with the conditions under which it
// takes the call.
#include "plan/sdpa_plan.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "call/mask_args.h"
#include "call/tensor_util.h"
#include "execute/amx_prefill.h"
#include "execute/half_precision.h"
#include "kernels/kernel_choice.h"

namespace attention::detail {

namespace {

// Storage of destroyed nested plans, kept for this thread's next ones (freed when it exits).
struct PlanStorage {
  ~PlanStorage() {
    for (void* block : free) ::operator delete(block);
  }
  std::vector<void*> free;
};
thread_local PlanStorage plan_storage;

}  // namespace

void RecycledPlanDelete::operator()(SdpaPlan* plan) const {
  plan->~SdpaPlan();
  plan_storage.free.push_back(plan);
}

NestedSdpaPlan new_nested_plan() {
  void* block = nullptr;
  if (plan_storage.free.empty()) {
    block = ::operator new(sizeof(SdpaPlan));
  } else {
    block = plan_storage.free.back();
    plan_storage.free.pop_back();
  }
  return NestedSdpaPlan(new (block) SdpaPlan());
}

const char* route_name(SdpaRoute route) {
  switch (route) {
    case SdpaRoute::Nothing:
      return "nothing";
    case SdpaRoute::Rope:
      return "rope";
    case SdpaRoute::DecodeAsPaged:
      return "decode-as-paged";
    case SdpaRoute::GroupedRows:
      return "grouped-rows";
    case SdpaRoute::Half:
      return "half";
    case SdpaRoute::NoKeys:
      return "no-keys";
    case SdpaRoute::Gpu:
      return "gpu";
    case SdpaRoute::Masked:
      return "masked";
    case SdpaRoute::Plain:
      return "plain";
  }
  return "?";
}

namespace {

void plan_widened(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out, SdpaPlan* plan);

const char* half_route_name(HalfRoute half) {
  switch (half) {
    case HalfRoute::AmxPrefill:
      return "amx-prefill";
    case HalfRoute::Bf16Prefill:
      return "bf16-prefill";
    case HalfRoute::HalfKvDecode:
      return "half-kv-decode";
    case HalfRoute::Widened:
      return "widened-to-fp32";
    case HalfRoute::Gpu:
      return "gpu";
  }
  return "?";
}

// The half route of a CPU call with a half operand (run_half runs it).
void plan_half(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               SdpaPlan* plan) {
  const MaskOptions& m = plan->options.mask;
  if (plan->run != Run::CPU) {
    plan->half = HalfRoute::Gpu;
    plan->half_kv = gpu_half_kv_decode(plan->run, k.dtype, v.dtype, q.shape[2], k.shape[2]);
    if (plan->half_kv != nullptr) {
      plan->kernel = m.empty() ? plan->half_kv->plain.name : plan->half_kv->masked.name;
    } else {
      plan_widened(q, k, v, out, plan);
    }
    return;
  }
  if (amx_prefill_takes(q, k, v, out, m, &plan->amx_causal_offset)) {
    plan->half = HalfRoute::AmxPrefill;
    plan->kernel = amx_prefill_kernel_name();
    return;
  }
  const bool dense_rows = q.strides[3] == 1 && k.strides[3] == 1 && v.strides[3] == 1;
  plan->plain = bf16_prefill_for(q.dtype, k.dtype, v.dtype, out.dtype, !m.empty(), q.shape[2],
                                 k.shape[2], q.shape[3]);
  if (plan->plain != nullptr && dense_rows) {
    plan->half = HalfRoute::Bf16Prefill;
    plan->kernel = plan->plain->name;
    return;
  }
  plan->plain = nullptr;
  plan->half_kv = half_kv_decode(k.dtype, v.dtype, !m.empty(), q.shape[0], k.shape[1], q.shape[2],
                                 k.shape[2], &plan->choice);
  if (plan->half_kv != nullptr) {
    plan->half = HalfRoute::HalfKvDecode;
    plan->kernel = m.empty() ? plan->half_kv->plain.name : plan->half_kv->masked.name;
    return;
  }
  plan->half = HalfRoute::Widened;
  plan_widened(q, k, v, out, plan);
}

}  // namespace

TensorView fp32_copy_view(const TensorView& t) {
  if (t.dtype == DType::Float32) return t;
  if (t.data == nullptr || t.numel() == 0) {
    TensorView view = t;
    view.dtype = DType::Float32;
    return view;
  }
  return dense_view(t, t.data, DType::Float32);
}

namespace {

// The rest of a half call as the fp32 call over its widened operands (HalfRoute::Widened, and
// HalfRoute::Gpu without a half-KV kernel).
void plan_widened(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out, SdpaPlan* plan) {
  SdpaOptions fp32_options = plan->options;
  fp32_options.mask.additive_mask = fp32_copy_view(plan->options.mask.additive_mask);
  plan->then = new_nested_plan();
  plan_sdpa(plan->run, fp32_copy_view(q), fp32_copy_view(k), fp32_copy_view(v), fp32_copy_view(out),
            fp32_options, plan->then.get());
}

// SdpaOptions::rope with keys: fused into the masked prefill where an fp32 CPU call takes the
// prefill kernel; otherwise q and k rotated into dense fp32 copies and the rest without rope.
void plan_rope(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               SdpaPlan* plan) {
  const auto& masked = cpu_rows().sdpa.masked;
  if (plan->run == Run::CPU && !has_half_operand(q, k, v, out, plan->options.mask) &&
      choose_kernel(masked.prefill.name, masked.decode.name, q.shape[0], k.shape[1], q.shape[2],
                    k.shape[2])
          .prefill) {
    plan->rope_fused = true;
    plan->kernel = rope_prefill_kernel().name;
    return;
  }
  SdpaOptions rest = plan->options;
  rest.rope.reset();
  plan->then = new_nested_plan();
  plan_sdpa(plan->run, dense_view(q, q.data, DType::Float32), dense_view(k, k.data, DType::Float32),
            v, out, rest, plan->then.get());
}

}  // namespace

bool has_half_operand(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const MaskOptions& m) {
  for (const TensorView* t : {&q, &k, &v, &out, &m.additive_mask}) {
    if (is_half(t->dtype)) return true;
  }
  return false;
}

void plan_sdpa(Run run, const TensorView& q, const TensorView& call_k, const TensorView& call_v,
               const TensorView& out, const SdpaOptions& call_options, SdpaPlan* plan) {
  plan->run = run;
  plan->options = call_options;
  plan->key_begin = 0;
  plan->key_end = call_k.shape[2];
  if (out.numel() == 0) {
    plan->route = SdpaRoute::Nothing;
    return;
  }
  const int64_t B = q.shape[0], Sq = q.shape[2], D = q.shape[3];
  MaskOptions& m = plan->options.mask;
  if (call_k.shape[2] > 0) m = without_inert_pieces(m, B, Sq, call_k.shape[2]);
  if (plan->options.rope && call_k.shape[2] > 0) {
    plan->route = SdpaRoute::Rope;
    plan_rope(q, call_k, call_v, out, plan);
    return;
  }
  // The key cuts, each on the keys the previous left, until none applies. CPU calls: GPU device
  // handles are not offset.
  const auto cut = [&](const char* why, int64_t begin, int64_t end) {
    const int64_t Sk = plan->key_end - plan->key_begin;
    BatchLengths lengths;
    m = mask_over_keys(m, B, Sk, begin, end, lengths);
    plan->key_lengths = lengths;  // m.key_lengths points into `lengths` until moved to the plan's
    if (m.key_lengths.data != nullptr) m.key_lengths.data = plan->key_lengths.data();
    plan->cuts.push_back({why, begin, end});
    plan->key_end = plan->key_begin + end;
    plan->key_begin += begin;
    if (end > begin) m = without_inert_pieces(m, B, Sq, end - begin);
  };
  while (run == Run::CPU) {
    const int64_t Sk = plan->key_end - plan->key_begin;
    // A bottom-right sliding window leaves every row's first Sk - Sq - window keys behind: the
    // call runs on the keys after them (the diagonals keep their distance to the last key).
    if (m.causal == Causal::BottomRight && m.window >= 0 && m.window < Sk - Sq) {
      cut("window", Sk - Sq - m.window, Sk);
      continue;
    }
    // Keys at or past the longest key length are no row's. Where the diagonals do not depend on
    // Sk (top-left causal, or neither causal nor ALiBi) the call runs on the keys before it.
    if (m.key_lengths.data != nullptr && Sk > 0 &&
        (m.causal == Causal::TopLeft || (m.causal == Causal::None && !m.alibi))) {
      const BatchLengths lengths = lengths_or(m.key_lengths, B, Sk);
      const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
      if (longest < Sk) {
        cut("key lengths", 0, longest);
        continue;
      }
    }
    break;
  }
  const int64_t Sk = plan->key_end - plan->key_begin;
  const TensorView k = slice(call_k, 2, plan->key_begin, Sk);
  const TensorView v = slice(call_v, 2, plan->key_begin, Sk);
  if (run == Run::CPU && Sk > 0) {
    if (decode_as_paged_takes(q, k, v, plan->options, &plan->pool)) {
      plan->route = SdpaRoute::DecodeAsPaged;
      return;
    }
    if (grouped_rows_take(q, k, v, plan->options, &plan->grouped)) {
      plan->route = SdpaRoute::GroupedRows;
      return;
    }
  }
  if (has_half_operand(q, k, v, out, m)) {
    plan->route = SdpaRoute::Half;
    plan_half(q, k, v, out, plan);
    return;
  }
  if (Sk == 0) {
    plan->route = SdpaRoute::NoKeys;
    return;
  }
  if (run != Run::CPU) {
    plan->route = SdpaRoute::Gpu;
    plan->kernel = gpu_sdpa_kernel_name(run, !m.empty(), Sq);
    return;
  }
  if (!m.empty()) {
    const auto [kernel, choice] = pick_masked_sdpa(cpu_rows(), B, k.shape[1], Sq, Sk, D);
    plan->route = SdpaRoute::Masked;
    plan->masked = &kernel;
    plan->choice = choice;
    plan->kernel = kernel.name;
    return;
  }
  const auto [kernel, choice] = pick_sdpa(cpu_rows(), B, k.shape[1], Sq, Sk, D);
  plan->route = SdpaRoute::Plain;
  plan->plain = &kernel;
  plan->choice = choice;
  plan->kernel = kernel.name;
}

std::string SdpaPlan::describe() const {
  std::string s = std::string(route_name(route)) + " backend=" + backend_name(run);
  if (route == SdpaRoute::Half) s += std::string(" half=") + half_route_name(half);
  if (kernel != nullptr) s += std::string(" kernel=") + kernel;
  if (route == SdpaRoute::Plain || route == SdpaRoute::Masked ||
      (route == SdpaRoute::Half && half == HalfRoute::HalfKvDecode)) {
    s += " key_split=" + std::to_string(choice.key_split);
  }
  for (const KeyCut& c : cuts) {
    s += std::string(" cut(") + c.why + ")=[" + std::to_string(c.begin) + "," +
         std::to_string(c.end) + ")";
  }
  if (route == SdpaRoute::DecodeAsPaged) {
    s += " block=" + std::to_string(pool.block) + " blocks=" + std::to_string(pool.blocks);
  }
  if (route == SdpaRoute::GroupedRows) {
    s += grouped.decode_rows ? " rows=decode-row-blocks" : " rows=one-head";
    s += " rows_per_head=" + std::to_string(grouped.rows_per_head);
    if (grouped.head_keys > 0) s += " head_keys=" + std::to_string(grouped.head_keys);
  }
  if (route == SdpaRoute::Half && half == HalfRoute::AmxPrefill &&
      amx_causal_offset != kAmxNoCausal) {
    s += " causal_offset=" + std::to_string(amx_causal_offset);
  }
  if (rope_fused) s += " rotation=fused";
  if (then != nullptr) s += " then: " + then->describe();
  return s;
}

bool log_plans() {
  static const bool on = [] {
    const char* value = std::getenv("ATTENTION_LOG_PLAN");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return on;
}

void log_plan(const char* entry, const std::string& plan) {
  std::fprintf(stderr, "attention: %s: %s\n", entry, plan.c_str());
}

namespace {
std::atomic<std::vector<std::string>*> recorder{nullptr};
std::mutex recorder_mutex;
}  // namespace

void record_kernels(std::vector<std::string>* names) { recorder.store(names); }

void note_kernel(const char* name) {
  std::vector<std::string>* names = recorder.load(std::memory_order_relaxed);
  if (names == nullptr) return;
  std::lock_guard<std::mutex> lock(recorder_mutex);
  names->emplace_back(name);
}

}  // namespace attention::detail
