#include "execute/amx_prefill.h"

#include <HalideRuntime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "call/validate.h"
#include "execute/half_precision.h"
#include "kernels/generated_kernels.h"
#include "kernels/halide_view.h"
#include "kernels/kernel_table.h"
#if ATTENTION_AMX_PREFILL
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sdpa_bf16_amx_prefill.h"
#endif

namespace attention::detail {
namespace {

// Keys per call at most: a work item keeps 32 rows of fp32 scores and fp32 and bf16 weights (10
// bytes per key and row, 2.5 MiB at 8192 keys, about a core's L2). Longer calls take the vdpbf16ps
// kernel, whose splits keep its scratch small.
constexpr int64_t kAmxMaxKeys = 8192;

#if ATTENTION_AMX_PREFILL
// AMX-TILE and AMX-BF16 by CPUID (leaf 7, edx bits 24 and 22), then Linux's permission to use the
// tile data (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)), which a process must ask for
// before its first tile instruction; it holds for every thread of the process.
bool cpu_grants_amx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if ((d & (1u << 22)) == 0 || (d & (1u << 24)) == 0) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#endif

bool amx_enabled() {
#if ATTENTION_AMX_PREFILL
  static const bool enabled = [] {
    const char* env = std::getenv("ATTENTION_CPU_AMX");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    return cpu_grants_amx();
  }();
  return enabled;
#else
  return false;
#endif
}

}  // namespace

const char* amx_prefill_kernel_name() { return "sdpa_bf16_amx_prefill"; }

bool amx_prefill_serves(int64_t Sq, int64_t Sk, int64_t D, int64_t Dv) {
  if (D % 32 != 0 || D <= 0 || Dv % 16 != 0 || Dv < 32 || Sq < 32 || Sk < 1 || Sk > kAmxMaxKeys ||
      !amx_enabled()) {
    return false;
  }
  // An application's halide_set_custom_can_use_target_features (or ATTENTION_BENCH_ISA) that
  // refuses Sapphire Rapids' features refuses AMX too.
  constexpr int kWords = (halide_target_feature_end + 63) / 64;
  uint64_t features[kWords] = {};
  const int f = halide_target_feature_avx512_sapphirerapids;
  features[f / 64] |= uint64_t(1) << (f % 64);
  return halide_can_use_target_features(kWords, features) != 0;
}

bool amx_prefill_takes(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const MaskOptions& mask, int64_t* causal_offset) {
  const int64_t Sq = q.shape[2], Sk = k.shape[2];
  // All BFloat16 and the native bf16 prefill allowed here (its ISA check); the mask comes below.
  if (bf16_prefill_for(q.dtype, k.dtype, v.dtype, out.dtype, /*masked=*/false, Sq, Sk,
                       q.shape[3]) == nullptr ||
      q.strides[3] != 1 || k.strides[3] != 1 || v.strides[3] != 1 ||
      !amx_prefill_serves(Sq, Sk, q.shape[3], v.shape[3])) {
    return false;
  }
  if (mask.empty()) {
    *causal_offset = kAmxNoCausal;
    return true;
  }
  MaskOptions others = mask;
  others.causal = Causal::None;
  if (mask.causal == Causal::None || !others.empty()) return false;
  if (mask.causal == Causal::BottomRight && Sq > Sk) return false;
  // Hidden keys' values are multiplied by a weight of 0: refuse values that make that NaN.
  for (int64_t b = 0; b < v.shape[0]; ++b) {
    for (int64_t h = 0; h < v.shape[1]; ++h) {
      for (int64_t j = 0; j < Sk; ++j) {
        const auto* row = static_cast<const uint16_t*>(v.data) + b * v.strides[0] +
                          h * v.strides[1] + j * v.strides[2];
        // A row at a time without an early exit, a loop the compiler vectorizes (this scan runs
        // on the calling thread alone).
        unsigned non_finite = 0;
        for (int64_t c = 0; c < v.shape[3]; ++c) non_finite |= (row[c] & 0x7f80) == 0x7f80;
        if (non_finite != 0) return false;
      }
    }
  }
  *causal_offset = mask.causal == Causal::TopLeft ? 0 : Sk - Sq;
  return true;
}

#if ATTENTION_AMX_PREFILL
namespace {

// Query rows per kernel call under a causal mask (two work items; the last call of a head takes
// the rest, 64 to 127 rows): a causal call reads the keys its last row sees, so short calls skip
// more keys, and many short calls balance a head's growing rows over the cores. (The calls, not
// the kernel, which runs its work items in turn, are what the cores share: one call per head
// with the kernel parallel over its work items ran a causal head's 32 calls of two items each
// only 1.1x faster on two threads than on one, the threads taking each other's items.)
constexpr int64_t kCausalRowsPerCall = 64;
// Unmasked calls are longer (fewer calls, the same keys): at least this many calls per thread in a
// group, each of at least 64 rows.
constexpr int64_t kUnmaskedCallsPerThread = 8;

// The kv heads run in groups: the group's heads are packed (a task each), then their query
// heads' calls run (a task each). A group packs about 1 MiB per thread (half an L2 of the Xeons
// AMX is on), so its K and V are still in the cores' L2 when the calls read them (all heads
// packed first, then all calls, made the calls 6% slower at 1x16x1024x1024x128) and few groups
// run (each is two waits for the pool: with one head per thread, 1x8x512x512x64 ran 1.2x slower).
constexpr int64_t kGroupBytesPerThread = int64_t{1} << 20;

// One call's operands and the group being run, shared by its tasks.
struct AmxCall {
  const TensorView *q, *k, *v, *out, *lse;
  float scale;
  int64_t causal_offset;    // kAmxNoCausal: none
  int64_t keys;             // Sk rounded up to 32
  int64_t first_kv_head;    // the group's first (batch, kv head), as b * Hkv + hk
  int64_t kv_heads;         // in the group
  int64_t rows_per_call;    // the last call of a head takes the rest
  int64_t calls_per_head;
  uint16_t* packed;         // the group's packed K and V, one kv head after another
  std::mutex mutex;
  Status status;  // the first failure

  int64_t kp_size() const { return keys * q->shape[3]; }
  int64_t head_size() const { return kp_size() + keys * v->shape[3]; }
  void fail(Status failure) {
    const std::lock_guard<std::mutex> lock(mutex);
    if (status.ok()) status = std::move(failure);
  }
};

// The packing in AVX-512 (every CPU with AMX has it; the rest of this file is built for any
// x86-64). The scalar loops it replaces, a 32-bit store per key and feature pair and SSE2 for V,
// took 9% of 4x12x256x256x64 on one thread.
#define ATTENTION_AVX512 __attribute__((target("avx512f,avx512bw")))
// GCC 12 warns of the unpack intrinsics' undefined pass-through operand.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// K's tile t of 16 keys (rows[l], nullptr past Sk: zeros) as AMX's right operand: feature pair dp
// of key l at tile[32 dp + 2 l], i.e. 16 x 16 blocks of 32-bit words transposed.
ATTENTION_AVX512 void pack_k_tile(const uint16_t* const rows[16], int64_t D, uint16_t* tile) {
  for (int64_t dp0 = 0; dp0 < D / 2; dp0 += 16) {
    __m512i r[16], t[16];
    for (int l = 0; l < 16; ++l) {
      r[l] = rows[l] == nullptr ? _mm512_setzero_si512() : _mm512_loadu_si512(rows[l] + 2 * dp0);
    }
    // Pairs, quads and 128-bit lanes interleaved: word m of every row into vector m.
    for (int l = 0; l < 16; l += 2) {
      t[l] = _mm512_unpacklo_epi32(r[l], r[l + 1]);
      t[l + 1] = _mm512_unpackhi_epi32(r[l], r[l + 1]);
    }
    for (int l = 0; l < 16; l += 4) {
      r[l] = _mm512_unpacklo_epi64(t[l], t[l + 2]);
      r[l + 1] = _mm512_unpackhi_epi64(t[l], t[l + 2]);
      r[l + 2] = _mm512_unpacklo_epi64(t[l + 1], t[l + 3]);
      r[l + 3] = _mm512_unpackhi_epi64(t[l + 1], t[l + 3]);
    }
    for (int l = 0; l < 4; ++l) {
      t[l] = _mm512_shuffle_i32x4(r[l], r[l + 4], 0x88);
      t[l + 4] = _mm512_shuffle_i32x4(r[l], r[l + 4], 0xdd);
      t[l + 8] = _mm512_shuffle_i32x4(r[l + 8], r[l + 12], 0x88);
      t[l + 12] = _mm512_shuffle_i32x4(r[l + 8], r[l + 12], 0xdd);
    }
    for (int l = 0; l < 4; ++l) {
      r[l] = _mm512_shuffle_i32x4(t[l], t[l + 8], 0x88);
      r[l + 8] = _mm512_shuffle_i32x4(t[l], t[l + 8], 0xdd);
      r[l + 4] = _mm512_shuffle_i32x4(t[l + 4], t[l + 12], 0x88);
      r[l + 12] = _mm512_shuffle_i32x4(t[l + 4], t[l + 12], 0xdd);
    }
    // r[m]: word m of the 16 rows.
    for (int m = 0; m < 16; ++m) _mm512_storeu_si512(tile + 32 * (dp0 + m), r[m]);
  }
}

// Values rows 2 jp and 2 jp + 1 (row1 nullptr past Sk: zeros) interleaved into 32-bit words.
ATTENTION_AVX512 void pack_v_pair(const uint16_t* row0, const uint16_t* row1, int64_t Dv,
                                  uint16_t* dst) {
  const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
  const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
  for (int64_t c = 0; c < Dv; c += 32) {
    const __mmask32 mask = Dv - c >= 32 ? ~__mmask32{0} : __mmask32{0xffff};  // Dv % 16 == 0
    const __m512i a = _mm512_maskz_loadu_epi16(mask, row0 + c);
    const __m512i b =
        row1 == nullptr ? _mm512_setzero_si512() : _mm512_maskz_loadu_epi16(mask, row1 + c);
    // Within each 128-bit lane: lo holds columns 8k..8k+3, hi 8k+4..8k+7, each with its pair.
    const __m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
    _mm512_storeu_si512(dst + 2 * c, _mm512_permutex2var_epi64(lo, first, hi));
    if (Dv - c >= 32) {
      _mm512_storeu_si512(dst + 2 * c + 32, _mm512_permutex2var_epi64(lo, second, hi));
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef ATTENTION_AVX512

// Task: one kv head of the group packed into AMX's VNNI layout. K in tiles of 16 keys, each D/2
// rows of 64 contiguous bytes: key 16 t + l's features 2 dp + p at kp[16 D t + 32 dp + 2 l + p]
// (pairs of features, a key per 32-bit word, as tdpbf16ps's right operand takes them);
// vp(p, c, jp) = v(c, 2 jp + p): pairs of keys. Zeros past Sk, to 32 keys.
int pack_kv_head(void* /*user_context*/, int task, uint8_t* closure) {
  AmxCall& call = *reinterpret_cast<AmxCall*>(closure);
  const TensorView &k = *call.k, &v = *call.v;
  const int64_t D = k.shape[3], Dv = v.shape[3], Hkv = k.shape[1], Sk = k.shape[2];
  const int64_t keys = call.keys, head = call.first_kv_head + task;
  const int64_t b = head / Hkv, hk = head % Hkv;
  uint16_t* kp = call.packed + task * call.head_size();
  uint16_t* vp = kp + call.kp_size();
  const uint16_t* kh = static_cast<const uint16_t*>(k.data) + b * k.strides[0] + hk * k.strides[1];
  const uint16_t* vh = static_cast<const uint16_t*>(v.data) + b * v.strides[0] + hk * v.strides[1];
  for (int64_t t = 0; t < keys / 16; ++t) {
    const uint16_t* rows[16];
    for (int64_t l = 0; l < 16; ++l) {
      const int64_t j = 16 * t + l;
      rows[l] = j < Sk ? kh + j * k.strides[2] : nullptr;
    }
    pack_k_tile(rows, D, kp + 16 * D * t);
  }
  for (int64_t jp = 0; jp < keys / 2; ++jp) {
    const int64_t j = 2 * jp;
    if (j >= Sk) {
      std::memset(vp + jp * Dv * 2, 0, size_t(Dv) * 2 * sizeof(uint16_t));
      continue;
    }
    const uint16_t* row0 = vh + j * v.strides[2];
    pack_v_pair(row0, j + 1 < Sk ? row0 + v.strides[2] : nullptr, Dv, vp + jp * Dv * 2);
  }
  return 0;
}

// Task: one kernel call, rows [r0, r1) of a query head of the group over the keys they see. The
// tasks are taken in order: a head's calls one after another (its K and V stay in L2; cycling
// through the heads, 8 heads' K and V at 2048 keys, made the calls 1.2x slower), each head's last
// rows first (under a causal mask the calls with the most keys; the last tasks taken are short).
int run_rows(void* /*user_context*/, int task, uint8_t* closure) {
  AmxCall& call = *reinterpret_cast<AmxCall*>(closure);
  const TensorView &q = *call.q, &out = *call.out, &lse = *call.lse;
  const int64_t H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const int64_t Hkv = call.k->shape[1], Sk = call.k->shape[2], Dv = call.v->shape[3];
  const int64_t group = H / Hkv;
  const int64_t query_head = task / call.calls_per_head;  // in the group
  const int64_t n = call.calls_per_head - 1 - task % call.calls_per_head;
  const int64_t kv_head = query_head / group;  // in the group
  const int64_t head = call.first_kv_head + kv_head;
  const int64_t b = head / Hkv, h = (head % Hkv) * group + query_head % group;
  const int64_t r0 = n * call.rows_per_call;
  const int64_t r1 = n == call.calls_per_head - 1 ? Sq : r0 + call.rows_per_call;
  // Row r sees keys j <= r + offset: the call reads min(Sk, r1 + offset) of them.
  const bool causal = call.causal_offset != kAmxNoCausal;
  const int64_t seen = causal ? std::min(Sk, r1 + call.causal_offset) : Sk;
  const int64_t offset = causal ? r0 + call.causal_offset : kAmxNoCausal;
  const int64_t cropped = (seen + 31) / 32 * 32;
  uint16_t* kp = call.packed + kv_head * call.head_size();
  uint16_t* vp = kp + call.kp_size();
  // kp as the kernel indexes it: (p, l + 8 D t, dp), strides (1, 2, 32); both cropped to the keys
  // seen, rounded up to 32.
  HalideView hkp(TensorView::strided(kp, DType::BFloat16,
                                     {D / 2, 8 * D * (cropped / 16 - 1) + 16, 2}, {32, 2, 1}));
  HalideView hvp(TensorView::contiguous(vp, DType::BFloat16, {cropped / 2, Dv, 2}));
  TensorView qh = q, oh = out, lh = lse;
  qh.data =
      static_cast<uint16_t*>(q.data) + b * q.strides[0] + h * q.strides[1] + r0 * q.strides[2];
  qh.rank = 2, qh.shape = {r1 - r0, D}, qh.strides = {q.strides[2], 1};
  oh.data = static_cast<uint16_t*>(out.data) + b * out.strides[0] + h * out.strides[1] +
            r0 * out.strides[2];
  oh.rank = 2, oh.shape = {r1 - r0, Dv}, oh.strides = {out.strides[2], out.strides[3]};
  lh.data = static_cast<float*>(lse.data) + b * lse.strides[0] + h * lse.strides[1] +
            r0 * lse.strides[2];
  lh.rank = 1, lh.shape = {r1 - r0}, lh.strides = {lse.strides[2]};
  HalideView hq(qh), hout(oh), hlse(lh);
  Status status = run_kernel(amx_prefill_kernel_name(), sdpa_bf16_amx_prefill, hq.get(),
                             hkp.get(), hvp.get(), call.scale, static_cast<int32_t>(seen),
                             static_cast<int32_t>(offset), hout.get(), hlse.get());
  if (!status.ok()) {
    call.fail(std::move(status));
    return -1;
  }
  return 0;
}

}  // namespace
#endif

Status run_amx_prefill(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const TensorView& lse, float scale,
                       int64_t causal_offset) {
#if ATTENTION_AMX_PREFILL
  AmxCall call{&q, &k, &v, &out, &lse, scale, causal_offset, 0, 0, 0, 0, 0, nullptr, {},
               Status::ok_status()};
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2], Hkv = k.shape[1];
  call.keys = (k.shape[2] + 31) / 32 * 32;
  const int64_t head_bytes = call.head_size() * int64_t{sizeof(uint16_t)};
  const int64_t threads = attention::num_threads();
  const int64_t per_group =
      std::clamp<int64_t>(kGroupBytesPerThread * threads / head_bytes, 1, B * Hkv);
  // From halide_malloc's per-thread cache: a call in steady state allocates nothing.
  ScratchInts storage;
  ATTENTION_RETURN_IF_ERROR(allocate_ints((per_group * call.head_size() + 1) / 2,
                                          "the AMX prefill's packed k and v", storage));
  call.packed = reinterpret_cast<uint16_t*>(storage.get());
  for (int64_t first = 0; first < B * Hkv; first += per_group) {
    call.first_kv_head = first;
    call.kv_heads = std::min(per_group, B * Hkv - first);
    const int64_t query_heads = call.kv_heads * (H / Hkv);
    if (causal_offset != kAmxNoCausal) {
      call.rows_per_call = kCausalRowsPerCall;
    } else {
      const int64_t wanted = (kUnmaskedCallsPerThread * threads + query_heads - 1) / query_heads;
      const int64_t calls = std::clamp<int64_t>(wanted, 1, std::max<int64_t>(1, Sq / 64));
      call.rows_per_call = std::max<int64_t>(32, Sq / calls / 32 * 32);
    }
    call.calls_per_head = std::max<int64_t>(1, Sq / call.rows_per_call);
    const int packs = static_cast<int>(call.kv_heads);
    const int calls = static_cast<int>(query_heads * call.calls_per_head);
    int code =
        halide_do_par_for(nullptr, pack_kv_head, 0, packs, reinterpret_cast<uint8_t*>(&call));
    if (code == 0) {
      code = halide_do_par_for(nullptr, run_rows, 0, calls, reinterpret_cast<uint8_t*>(&call));
    }
    if (!call.status.ok()) return call.status;
    if (code != 0) {
      return Status::error(
          StatusCode::KernelFailure,
          "internal: the AMX prefill's tasks failed (code " + std::to_string(code) + ")");
    }
  }
  return Status::ok_status();
#else
  (void)q, (void)k, (void)v, (void)out, (void)lse, (void)scale, (void)causal_offset;
  return Status::error(StatusCode::Unsupported, "internal: this build has no AMX kernel");
#endif
}

}  // namespace attention::detail
