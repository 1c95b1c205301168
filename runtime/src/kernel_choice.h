// Which generated kernel serves a call (prefill or decode) and how it splits the keys. Shared by
// every entry point whose kernels come from the SDPA generators.
#pragma once

#include <algorithm>
#include <cstdint>

namespace attention::detail {

// Up to this many query rows the decode kernel (dot products along d, no query reuse) beats the
// prefill kernel (register blocks of 16-48 queries); measured crossover on AVX2 at Sk = 4096,
// D = 128: Sq = 1: 7.5 vs 13.3 ms, Sq = 2: 10.0 vs 13.7, Sq = 3: 14.6 vs 12.6, Sq = 8: 17.7
// vs 14.0.
inline constexpr int64_t kDecodeMaxQueries = 2;

// Split-KV for the decode kernels: each (key split, head, batch) is one parallel work item. Keys
// are split until there are about kDecodeWorkItems items (enough for every core of a large
// machine to get one, and uneven finishing times to even out on a small one), but no split is
// shorter than kMinSplitKeys keys, whose K and V rows dwarf the Dv + 1 floats each split hands to
// the combine. The count depends on the shape only, never on the thread count, so results stay
// bit-identical for any number of threads. Split lengths are multiples of kSplitKeyMultiple (the
// masked kernels skip keys in blocks of up to 16).
inline constexpr int64_t kDecodeWorkItems = 64;
inline constexpr int64_t kMinSplitKeys = 512;
inline constexpr int64_t kSplitKeyMultiple = 64;

inline int32_t decode_key_split(int64_t B, int64_t H, int64_t Sk) {
  const int64_t items = std::max<int64_t>(B * H, 1);
  const int64_t splits = std::clamp<int64_t>((kDecodeWorkItems + items - 1) / items, 1,
                                             (Sk + kMinSplitKeys - 1) / kMinSplitKeys);
  const int64_t keys = (Sk + splits - 1) / splits;
  return static_cast<int32_t>((keys + kSplitKeyMultiple - 1) / kSplitKeyMultiple *
                              kSplitKeyMultiple);
}

// Prefill walks each query tile's keys in splits of about kPrefillSplitKeys (an online softmax over
// key blocks), so the tile's score and weight buffers (48 queries × split) stay in L2 however long
// the sequence. Splits are even (a ragged last split would compute scores past Sk) and a multiple
// of 8 keys (whole score register blocks). Like decode's, the split depends on the shape only.
inline constexpr int64_t kPrefillSplitKeys = 512;

inline int32_t prefill_key_split(int64_t Sk) {
  const int64_t splits = std::max<int64_t>((Sk + kPrefillSplitKeys - 1) / kPrefillSplitKeys, 1);
  const int64_t keys = (Sk + splits - 1) / splits;
  return static_cast<int32_t>((keys + 7) / 8 * 8);
}

// The variant that serves a call of Sq queries and its key split. Every SDPA-family generator
// builds both variants with the same arguments, so a call site picks the function and passes
// key_split once.
struct KernelChoice {
  bool prefill;
  int32_t key_split;
};

inline KernelChoice choose_kernel(int64_t B, int64_t H, int64_t Sq, int64_t Sk) {
  if (Sq > kDecodeMaxQueries) return {true, prefill_key_split(Sk)};
  return {false, decode_key_split(B, H, Sk)};
}

// GPU kernels (schedule/cuda.h): a split's k is staged whole in shared memory, so splits hold at
// most 64 keys up to D = 64, 32 up to 128, 16 beyond: with the 16-query q tile, scores and
// weights, a block's shared memory stays within 36 KiB up to D = 256. Every split is a block;
// decode splits the keys further when that leaves fewer than about kGpuDecodeBlocks blocks (a few
// per SM of a large GPU).
inline constexpr int64_t kGpuDecodeBlocks = 512;

inline int32_t gpu_max_key_split(int64_t D) { return D > 128 ? 16 : D > 64 ? 32 : 64; }

inline KernelChoice choose_gpu_kernel(int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D) {
  const int32_t most = gpu_max_key_split(D);
  if (Sq > kDecodeMaxQueries) return {true, most};
  const int64_t items = std::max<int64_t>(B * H, 1);
  const int64_t splits =
      std::clamp<int64_t>((kGpuDecodeBlocks + items - 1) / items, 1, std::max<int64_t>(Sk, 1));
  const int64_t keys = (Sk + splits - 1) / splits;
  return {false, static_cast<int32_t>(std::clamp<int64_t>((keys + 15) / 16 * 16, 16, most))};
}

}  // namespace attention::detail
