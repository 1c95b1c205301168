// The contract between the SDPA-family generators and the runtime that calls their kernels: the
// tilings the schedules use and the rules that pick a kernel and its key split from a call's shape.
// Both sides include this header (it needs nothing but the standard library), so a rule cannot
// assume a tile the schedule does not have. The runtime learns which CPU tiling runs from the
// generated kernel_info kernel (generators/probe_generator.cpp), built for the kernels' targets.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <string>

namespace attention_contract {

// CPU register and cache blocking (generators/schedule/cpu.h).
struct CpuTiling {
  int vector;          // fp32 lanes per vector register
  int score_queries;   // prefill Q·Kᵀ register block: queries (a multiple of vector)
  int score_keys;      // prefill Q·Kᵀ register block: keys
  int dot_lanes;       // decode Q·Kᵀ: partial sums per dot product (a multiple of vector)
  int pv_rows;         // prefill P·V register block: query rows
  int pv_cols;         // prefill P·V register block: value features (a multiple of vector)
  int query_tile;      // queries per work item
  int key_chunk;       // prefill: keys per P·V pass over a tile
  int mask_key_block;  // masked: keys per skipped-or-kept block (MaskInputs::key_block)
  // The key-split policy (a runtime argument; the schedule works with any split): prefill splits
  // of about this many keys, decode splits of no fewer (prefill_key_split, decode_key_split).
  int split_keys;

  static constexpr int kFields = 10;
  constexpr std::array<int, kFields> fields() const {
    return {vector,  score_queries, score_keys, dot_lanes,      pv_rows,
            pv_cols, query_tile,    key_chunk,  mask_key_block, split_keys};
  }
  static constexpr CpuTiling from_fields(const std::array<int, kFields>& f) {
    return {f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9]};
  }
  bool operator==(const CpuTiling& other) const { return fields() == other.fields(); }
};

// The default tiling of a CPU with `vector` fp32 lanes per register and `registers` vector
// registers (AVX-512 and AArch64 32, SSE/AVX2 16). wide_queries: prefill (many queries);
// otherwise decode (one or two queries).
constexpr CpuTiling cpu_tiling(int vector, int registers, bool wide_queries) {
  CpuTiling t{};
  t.vector = vector;
  const bool many_registers = registers >= 32;
  if (wide_queries) {
    // 32 regs: 3 query vectors × 8 keys = 24 accumulators + 3 q loads + 1 k broadcast.
    // 16 regs: 2 query vectors × 6 keys = 12 accumulators + 2 q loads + 1 k broadcast.
    t.score_queries = (many_registers ? 3 : 2) * vector;
    t.score_keys = many_registers ? 8 : 6;
    // 32 regs: 6 rows × 4 value vectors = 24 accumulators; 16 regs: 6 × 2 = 12 (+ loads,
    // broadcast).
    t.pv_rows = 6;
    t.pv_cols = (many_registers ? 4 : 2) * vector;
    // 48 is a multiple of every score_queries above and of pv_rows; 48 score rows × 2048 keys is
    // 384 KiB, which stays in a 512 KiB-2 MiB L2.
    t.query_tile = 48;
    // 128 keys: the chunk of v one register block reads (128 × pv_cols floats, 8-32 KiB) stays in
    // L1.
    t.key_chunk = 128;
    // Prefill reductions run along queries, so the key range may end at any key.
    t.mask_key_block = 1;
    // A 48-query tile's scores and weights over 512 keys (2 × 96 KiB) stay in L2.
    t.split_keys = 512;
  } else {
    // Few queries: stages run along keys or features, never across queries, so Sq == 1 wastes no
    // lanes. Fields not set here stay 0 (unused by the decode schedule).
    // 4 vector accumulators: independent FMA chains within one key's row, which is read front to
    // back (interleaving 4-8 rows of k, one chain each, read k at 7-9 GB/s on one core in a
    // harness, one row at a time at 15).
    t.dot_lanes = 4 * vector;
    t.query_tile = vector;
    // Decode reductions vectorize along keys: ranges in whole vectors keep every lane's predicate
    // the same (a per-lane predicate would scalarize the loop).
    t.mask_key_block = vector;
    // A split's K and V rows (512 × D floats each) dwarf the Dv + 1 floats it hands the combine.
    t.split_keys = 512;
  }
  return t;
}

// The native bf16 prefill (q_type=bfloat16: bfloat16 multiplied in pairs, x86 vdpbf16ps; see
// schedule_prefill_pair_stages): its Q·Kᵀ blocks run along keys, so score_keys is the multiple of
// the vector and score_queries the rows. Measured on Zen 5 at 1x8x2048x2048x64 (interleaved,
// medians of 3): 64 keys x 6 queries (24 accumulators) beside 4 key vectors and a broadcast;
// P·V key chunks of 64 and 256 ran 2-15% slower than 128, query tiles of 96 no faster and 192
// half as fast (the split's scores and weights leave L2).
constexpr CpuTiling cpu_pair_tiling(int vector) {
  CpuTiling t = cpu_tiling(vector, 32, true);
  t.score_queries = 6;
  t.score_keys = 4 * vector;
  return t;
}

// GPU tiling (generators/schedule/cuda.h), per API so CUDA and OpenCL can be tuned apart.
enum class GpuApi { CUDA, OpenCL };

// A block computes one key split of one query tile, each thread a register tile: Q·Kᵀ
// score_queries × score_keys scores over d in steps of 4 features (a 4-wide load of q or k per
// row), P·V pv_queries × pv_features outputs over the split's keys (the weights of 4 queries per
// load; a thread's features adjacent, v read from global memory). Every split
// holds exactly split_keys keys (the runtime passes that key_split), so the tiles have constant
// shapes.
struct GpuTiling {
  int query_tile;       // queries per block
  int split_keys;       // keys per block: the key split
  int score_queries;    // Q·Kᵀ register tile: queries
  int score_keys;       // Q·Kᵀ register tile: keys
  int pv_queries;       // P·V register tile: queries
  int pv_features;      // P·V register tile: value features
  int feature_threads;  // P·V threads along the value features (a pass covers × pv_features)
  int feature_block;    // q and k features staged in shared memory per step (a multiple of 4)
  int key_block;        // masked: keys per skipped-or-kept block (MaskInputs::key_block)

  constexpr int score_threads() const {
    return (query_tile / score_queries) * (split_keys / score_keys);
  }
  constexpr int pv_threads() const { return (query_tile / pv_queries) * feature_threads; }
};

constexpr GpuTiling gpu_tiling(GpuApi api, bool wide_queries) {
  (void)api;  // one tiling for both today
  GpuTiling t{};
  if (wide_queries) {
    // 64 queries × 64 keys: 8 × 16 threads of 8 × 4 scores (12 loads of 4 floats feed 128
    // FMAs), q and k staged 16 features at a time. P·V: 8 × 32 threads of 8 queries × 4 features
    // (2 loads of weights, 4 of v: 32 FMAs). Measured on an H200 against the 4 × 4 tiles staged
    // 8 features at a time (scripts/gpu_tiling_sweep.sh, bench/RESULTS.md): 1.26× at
    // 1×16×4096²×128, 1.18× at 1×8×2048²×64; other query tiles, splits and P·V tiles were slower.
    t.query_tile = 64;
    t.split_keys = 64;
    t.score_queries = 8;
    t.score_keys = 4;
    t.pv_queries = 8;
    t.pv_features = 4;
    t.feature_threads = 32;
    t.feature_block = 16;
  } else {
    // One or two queries (Sq <= kDecodeMaxQueries): each key and value is used at most twice, so
    // the tiles run along keys and features. A block is one warp on one query (Sq = 1 filled
    // half of a 2-query tile) streaming 64 keys, its P·V pass 32 × 4 features (Dv = 128 whole;
    // 64 × 4 left half the threads on padding). Measured on an H200 against the 2-query, 128-key
    // tile of 64 threads (scripts/gpu_tiling_sweep.sh MODE=decode / paged, bench/RESULTS.md):
    // 1×32×1×4096×128 decode 0.111 -> 0.097 ms, 8 batches 0.479 -> 0.427 ms, paged (block 16)
    // 0.231 -> 0.171 ms and 0.925 -> 0.600 ms with 8 sequences; two rows (GQA) on par.
    t.query_tile = 1;
    t.split_keys = 64;
    t.score_queries = 1;
    t.score_keys = 2;
    t.pv_queries = 1;
    t.pv_features = 4;
    t.feature_threads = 32;
    t.feature_block = 8;
  }
  t.key_block = 1;
  return t;
}

// ---- Kernel choice and key splits. They depend on the shape only, never on the thread count, so
// results stay bit-identical for any number of threads.

// Up to this many query rows the decode kernel (dot products along d, no query reuse) beats the
// prefill kernel (register blocks of 16-48 queries); measured crossover on AVX2 at Sk = 4096,
// D = 128: Sq = 1: 7.5 vs 13.3 ms, Sq = 2: 10.0 vs 13.7, Sq = 3: 14.6 vs 12.6, Sq = 8: 17.7
// vs 14.0.
inline constexpr int64_t kDecodeMaxQueries = 2;

// GQA decode as one head's rows: a decode call whose query heads per kv head times Sq make
// kDecodeRowBlock rows at D = kDecodeRowBlockDim runs on the CPU with each group's heads as rows of
// their kv head (the runtime's detail::gqa_rows, where the mask treats every row alike), and the
// decode kernels keep that block's Q·Kᵀ (a few keys × every row, k read once, key after key) and
// P·V (pairs of rows, whole outputs) in registers. The group's rows then use each key as it
// streams by, which hides their compute under the stream better than a work item that goes head
// by head over blocks of keys (1x32(8)x1x4096x128 against 1x8(8) on Zen 4: 1.42-1.59x ->
// 1.08-1.11x, bench/RESULTS.md).
inline constexpr int64_t kDecodeRowBlock = 4;
inline constexpr int64_t kDecodeRowBlockDim = 128;
// The rows per kv head the decode kernels take as row blocks: one block, or two in one item (a
// group of 8 heads, or 4 heads' 2 rows), each key block of k read from memory once for both.
inline constexpr int kDecodeRowBlockRows[] = {4, 8};
constexpr bool decode_row_block_rows(int64_t rows) {
  return rows == kDecodeRowBlockRows[0] || rows == kDecodeRowBlockRows[1];
}
// Whether a variant of decode tiling `t` runs 8 rows as two row blocks (32 vector registers, 16
// lanes: AVX-512); the others run them through the GQA blocks of keys, over rows.
constexpr bool two_row_blocks(const CpuTiling& t) { return t.vector >= 16; }

// Split-KV for the CPU decode kernels: each (key split, kv head, batch) is one parallel work item
// (it serves every query head that reads the kv head: GQA reads each kv head once). Keys are split
// until there are about kDecodeWorkItems items (enough for every core of a large machine to get
// one, and uneven finishing times to even out on a small one; a caller may ask for fewer,
// `work_items`), but no split is shorter than the decode tiling's split_keys. Split lengths are
// multiples of kSplitKeyMultiple, itself a multiple of every decode tiling's mask_key_block (the
// masked kernels skip keys in whole blocks).
inline constexpr int64_t kDecodeWorkItems = 64;
inline constexpr int64_t kSplitKeyMultiple = 64;

constexpr int32_t decode_key_split(int64_t B, int64_t Hkv, int64_t Sk, const CpuTiling& decode,
                                   int64_t work_items = kDecodeWorkItems) {
  const int64_t items = std::max<int64_t>(B * Hkv, 1);
  const int64_t least = std::max(decode.split_keys, 1);
  const int64_t splits =
      std::clamp<int64_t>((work_items + items - 1) / items, 1, (Sk + least - 1) / least);
  const int64_t keys = (Sk + splits - 1) / splits;
  return static_cast<int32_t>((keys + kSplitKeyMultiple - 1) / kSplitKeyMultiple *
                              kSplitKeyMultiple);
}

// Prefill walks each query tile's keys in splits of about the tiling's split_keys (an online
// softmax over key blocks), so the tile's score and weight buffers (query_tile × split) stay in L2
// however long the sequence. Splits are as even as whole score register blocks (tiling.score_keys
// keys) allow: a split that is not a whole number of blocks computes the rest of its last block
// anyway.
constexpr int32_t prefill_key_split(int64_t Sk, const CpuTiling& prefill) {
  const int64_t target = std::max(prefill.split_keys, 1);
  const int64_t splits = std::max<int64_t>((Sk + target - 1) / target, 1);
  const int64_t keys = (Sk + splits - 1) / splits;
  const int64_t block = std::max(prefill.score_keys, 1);
  return static_cast<int32_t>((keys + block - 1) / block * block);
}

// GPU shared memory per block: the staged blocks of q and k, the split's logits and weights. Kept
// within kGpuSharedBudget (below CUDA's 48 KiB per block without opt-in, with room for Halide's
// own shared allocations). Splits are multiples of kGpuSplitKeyMultiple keys.
constexpr int64_t gpu_shared_bytes(const GpuTiling& t) {
  const int64_t q = t.query_tile, keys = t.split_keys;
  return 4 * (q * t.feature_block + keys * t.feature_block + 2 * q * keys);
}
inline constexpr int64_t kGpuSharedBudget = 44 * 1024;
inline constexpr int32_t kGpuSplitKeyMultiple = 16;

// GPU device memory of the split results (schedule/cuda.h: split_result, computed whole before the
// combine) for `heads` (batch, head) pairs of `rows` query rows each, against Sk keys, Dv value
// features: two fp32 planes (each split's output and its logsumexp) over the value features
// rounded up to whole feature passes (feature_threads × pv_features), every key split, and the
// rows rounded up to whole query tiles. The runtime computes larger calls in chunks of rows (and
// of heads) that fit a workspace limit.
constexpr int64_t gpu_split_workspace_bytes(int64_t heads, int64_t rows, int64_t Sk, int64_t Dv,
                                            const GpuTiling& t) {
  const int64_t pass = int64_t{t.feature_threads} * t.pv_features;
  const int64_t features = (Dv + pass - 1) / pass * pass;
  const int64_t splits = (Sk + t.split_keys - 1) / t.split_keys;
  const int64_t padded_rows = (rows + t.query_tile - 1) / t.query_tile * t.query_tile;
  return 2 * 4 * features * splits * padded_rows * heads;
}

// ---- Tiling parameters: every tiling choice is a GeneratorParam of the SDPA-family generators
// (the tuner's search space), named as below; 0 or absent takes the target's default. The build
// records each kernel's parameters, so the runtime applies the same overrides to its split rules.

struct CpuTilingParam {
  const char* name;
  int CpuTiling::*field;
};
inline constexpr CpuTilingParam kCpuTilingParams[] = {{"score_queries", &CpuTiling::score_queries},
                                                      {"score_keys", &CpuTiling::score_keys},
                                                      {"dot_lanes", &CpuTiling::dot_lanes},
                                                      {"pv_rows", &CpuTiling::pv_rows},
                                                      {"pv_cols", &CpuTiling::pv_cols},
                                                      {"query_tile", &CpuTiling::query_tile},
                                                      {"key_chunk", &CpuTiling::key_chunk},
                                                      {"split_keys", &CpuTiling::split_keys}};
inline constexpr int kCpuTilingParamCount = std::size(kCpuTilingParams);

struct GpuTilingParam {
  const char* name;
  int GpuTiling::*field;
};
inline constexpr GpuTilingParam kGpuTilingParams[] = {
    {"gpu_query_tile", &GpuTiling::query_tile},
    {"gpu_split_keys", &GpuTiling::split_keys},
    {"gpu_score_queries", &GpuTiling::score_queries},
    {"gpu_score_keys", &GpuTiling::score_keys},
    {"gpu_pv_queries", &GpuTiling::pv_queries},
    {"gpu_pv_features", &GpuTiling::pv_features},
    {"gpu_feature_threads", &GpuTiling::feature_threads},
    {"gpu_feature_block", &GpuTiling::feature_block}};
inline constexpr int kGpuTilingParamCount = std::size(kGpuTilingParams);

// `t` with the non-zero values[i] of kCpuTilingParams[i] in place of its fields.
inline CpuTiling with_overrides(CpuTiling t, const std::array<int, kCpuTilingParamCount>& values) {
  for (int i = 0; i < kCpuTilingParamCount; ++i) {
    if (values[i] != 0) t.*kCpuTilingParams[i].field = values[i];
  }
  return t;
}

inline GpuTiling with_overrides(GpuTiling t, const std::array<int, kGpuTilingParamCount>& values) {
  for (int i = 0; i < kGpuTilingParamCount; ++i) {
    if (values[i] != 0) t.*kGpuTilingParams[i].field = values[i];
  }
  return t;
}

// Why the schedule cannot honour tiling `t` on a CPU with `registers` vector registers, naming the
// parameter; "" when it can. Register blocks must be whole vectors, fit the register file beside
// their loads, and tile the query tile exactly.
inline std::string cpu_tiling_error(const CpuTiling& t, int registers, bool wide_queries,
                                    bool bf16_pairs = false) {
  const auto v = [](int x) { return std::to_string(x); };
  if (t.split_keys <= 0) return "split_keys=" + v(t.split_keys) + ": must be positive";
  if (!wide_queries) {
    if (t.dot_lanes <= 0 || t.dot_lanes % t.vector != 0 || t.dot_lanes / t.vector > registers / 2) {
      return "dot_lanes=" + v(t.dot_lanes) + ": must be a multiple of the " + v(t.vector) +
             "-lane vector, at most " + v(registers / 2) + " vectors";
    }
    return "";
  }
  for (const CpuTilingParam& p : kCpuTilingParams) {
    if (p.field != &CpuTiling::dot_lanes && t.*p.field <= 0) {
      return std::string(p.name) + "=" + v(t.*p.field) + ": must be positive";
    }
  }
  // bf16 pairs: Q·Kᵀ blocks of whole key vectors; the splits and P·V chunks hold whole pairs.
  const int score_lanes = bf16_pairs ? t.score_keys : t.score_queries;
  if (score_lanes % t.vector != 0) {
    return std::string(bf16_pairs ? "score_keys=" : "score_queries=") + v(score_lanes) +
           ": must be a multiple of the " + v(t.vector) + "-lane vector";
  }
  if (bf16_pairs && t.key_chunk % 2 != 0) {
    return "key_chunk=" + v(t.key_chunk) + ": must be even (pairs of keys)";
  }
  if (t.pv_cols % t.vector != 0) {
    return "pv_cols=" + v(t.pv_cols) + ": must be a multiple of the " + v(t.vector) +
           "-lane vector";
  }
  const int score_vectors = score_lanes / t.vector, pv_vectors = t.pv_cols / t.vector;
  const int score_rows = bf16_pairs ? t.score_queries : t.score_keys;
  // Accumulators + the query (or key, or value) vectors loaded per step + one broadcast.
  if (score_vectors * score_rows + score_vectors + 1 > registers) {
    return "score_queries=" + v(t.score_queries) + ", score_keys=" + v(t.score_keys) + ": " +
           v(score_vectors * score_rows + score_vectors + 1) + " vector registers needed, " +
           v(registers) + " available";
  }
  if (t.pv_rows * pv_vectors + pv_vectors + 1 > registers) {
    return "pv_rows=" + v(t.pv_rows) + ", pv_cols=" + v(t.pv_cols) + ": " +
           v(t.pv_rows * pv_vectors + pv_vectors + 1) + " vector registers needed, " +
           v(registers) + " available";
  }
  if (t.query_tile % t.score_queries != 0 || t.query_tile % t.pv_rows != 0) {
    return "query_tile=" + v(t.query_tile) +
           ": must be a multiple of score_queries=" + v(t.score_queries) +
           " and pv_rows=" + v(t.pv_rows);
  }
  return "";
}

inline std::string gpu_tiling_error(const GpuTiling& t) {
  const auto v = [](int64_t x) { return std::to_string(x); };
  for (const GpuTilingParam& p : kGpuTilingParams) {
    if (t.*p.field <= 0) return std::string(p.name) + "=" + v(t.*p.field) + ": must be positive";
  }
  const auto multiple = [&](const char* name, int value, const std::string& of) {
    return std::string(name) + "=" + v(value) + ": must be a multiple of " + of;
  };
  if (t.query_tile % t.score_queries != 0 || t.query_tile % t.pv_queries != 0) {
    return multiple(
        "gpu_query_tile", t.query_tile,
        "gpu_score_queries=" + v(t.score_queries) + " and gpu_pv_queries=" + v(t.pv_queries));
  }
  if (t.split_keys % t.score_keys != 0 || t.split_keys % kGpuSplitKeyMultiple != 0) {
    return multiple("gpu_split_keys", t.split_keys,
                    "gpu_score_keys=" + v(t.score_keys) + " and " + v(kGpuSplitKeyMultiple));
  }
  if (t.feature_block % 4 != 0) return multiple("gpu_feature_block", t.feature_block, "4");
  if (t.score_threads() > 1024 || t.pv_threads() > 1024) {
    return "gpu_query_tile=" + v(t.query_tile) + ": " + v(t.score_threads()) + " Q·Kᵀ and " +
           v(t.pv_threads()) + " P·V threads per block, at most 1024";
  }
  if (t.score_threads() % t.feature_block != 0 || t.pv_threads() % t.feature_block != 0) {
    // The splits' kernel lays every stage's threads out feature_block wide (schedule/cuda.h).
    return "gpu_feature_block=" + v(t.feature_block) + ": must divide the block's " +
           v(t.score_threads()) + " Q·Kᵀ and " + v(t.pv_threads()) + " P·V threads";
  }
  if (t.score_queries * t.score_keys > 64 || t.pv_queries * t.pv_features > 64) {
    return "gpu_score_queries × gpu_score_keys and gpu_pv_queries × gpu_pv_features: at most 64 "
           "accumulators per thread";
  }
  if (gpu_shared_bytes(t) > kGpuSharedBudget) {
    return "gpu_query_tile=" + v(t.query_tile) + ", gpu_split_keys=" + v(t.split_keys) +
           ", gpu_feature_block=" + v(t.feature_block) + ": " + v(gpu_shared_bytes(t)) +
           " bytes of shared memory, more than " + v(kGpuSharedBudget);
  }
  return "";
}

// The variant that serves a call of Sq queries and its key split: every SDPA-family generator
// builds both variants with the same arguments, so a call site picks the function and passes
// key_split once.
struct KernelChoice {
  bool prefill;
  int32_t key_split;
};

constexpr bool use_prefill(int64_t Sq) { return Sq > kDecodeMaxQueries; }

// `prefill`, `decode`: the CPU tilings of the two variants that serve the call; Hkv: its kv heads.
constexpr KernelChoice choose_cpu_kernel(int64_t B, int64_t Hkv, int64_t Sq, int64_t Sk,
                                         const CpuTiling& prefill, const CpuTiling& decode) {
  if (use_prefill(Sq)) return {true, prefill_key_split(Sk, prefill)};
  return {false, decode_key_split(B, Hkv, Sk, decode)};
}

// `prefill` and `decode`: the tilings of the two GPU kernels. Every split is the kernel's
// split_keys (its register tiles have that shape); decode's parallelism comes from the splits.
constexpr KernelChoice choose_gpu_kernel(int64_t Sq, const GpuTiling& prefill,
                                         const GpuTiling& decode) {
  return use_prefill(Sq) ? KernelChoice{true, prefill.split_keys}
                         : KernelChoice{false, decode.split_keys};
}

// ---- Tuning buckets. The tuner (tools/attention-tune) records one winning tiling per bucket of
// shapes, and the runtime serves a call with the tuned kernel of its bucket when the build has
// one: the kernel variant (decode for Sq <= kDecodeMaxQueries), short or long query and key
// sequences, small or large heads, masked or not.
inline constexpr int64_t kLongQueries = 1024;  // Sq >= this: "long_q"
inline constexpr int64_t kLongKeys = 2048;     // Sk >= this: "long_k"
inline constexpr int64_t kSmallHeadDim = 64;   // D <= this: "d_le64"

// "<decode|short_q|long_q>.<short_k|long_k>.<d_le64|d_gt64>.<plain|masked>".
inline std::string shape_bucket(int64_t Sq, int64_t Sk, int64_t D, bool masked) {
  std::string name = !use_prefill(Sq) ? "decode" : Sq < kLongQueries ? "short_q" : "long_q";
  name += Sk < kLongKeys ? ".short_k" : ".long_k";
  name += D <= kSmallHeadDim ? ".d_le64" : ".d_gt64";
  name += masked ? ".masked" : ".plain";
  return name;
}

// What the rules above assume of the default tilings, checked where they are defined.
static_assert(kSplitKeyMultiple % cpu_tiling(16, 32, false).mask_key_block == 0 &&
                  kSplitKeyMultiple % cpu_tiling(8, 16, false).mask_key_block == 0 &&
                  kSplitKeyMultiple % cpu_tiling(4, 32, false).mask_key_block == 0,
              "decode splits must hold whole mask key blocks");
static_assert(kGpuSplitKeyMultiple % gpu_tiling(GpuApi::CUDA, true).key_block == 0 &&
                  kGpuSplitKeyMultiple % gpu_tiling(GpuApi::CUDA, false).key_block == 0,
              "GPU splits must hold whole mask key blocks");
static_assert(gpu_shared_bytes(gpu_tiling(GpuApi::CUDA, true)) <= kGpuSharedBudget &&
                  gpu_shared_bytes(gpu_tiling(GpuApi::CUDA, false)) <= kGpuSharedBudget,
              "the GPU tiles must fit the shared memory budget");

}  // namespace attention_contract
