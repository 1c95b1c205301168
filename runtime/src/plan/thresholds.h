// The measured thresholds the planner decides by (plan/sdpa_plan.cpp and the routes it names), one
// line each: what it decides and why. The measurements are in the commit bodies that set them
// (`git log -S <name>`) and in bench/RESULTS.md; change one only with an A/B of both binaries.
#pragma once

#include <cstdint>

namespace attention::detail {

// Decode over a sequence-major contiguous cache runs as the paged kernel over a pool view of it:
// one sequence from 128 keys and 1024 keys times kv heads (below, the call's few items cost more
// than the reads save), or a batch with 4 kv heads or more at any length (2 heads lose).
inline constexpr int64_t kPagedDecodeMinKeys = 128;
inline constexpr int64_t kPagedDecodeMinKeysTimesHeads = 1024;
inline constexpr int64_t kPagedDecodeBatchMinKvHeads = 4;

// GQA rows as one head's rows: at most this many query rows per head (past it the bottom-right
// tail's per-head Sq x Sq call grows with Sq squared while the prefix's share shrinks).
inline constexpr int64_t kGroupedMaxQueries = 64;
// Bottom-right causal as grouped rows from Sk >= 8·Sq keys (the per-head tail of Sq - 1 keys
// costs more below).
inline constexpr int64_t kCausalKeysPerQuery = 8;
// A bottom-right window besides causal: the window's keys must be at least 24 per row, 48 from
// 16 rows (the head's keys run per head too).
inline constexpr int64_t kWindowKeysPerQuery = 24;
inline constexpr int64_t kWindowManyRows = 16;
// Keys from which 2 rows of each of a pair (or group of 4) of query heads gain as the decode
// kernels' row block.
inline constexpr int64_t kPairRowsMinKeys = 256;
// Keys from which 5-8 rows of a head without GQA gain as the decode kernels' 8-row blocks.
inline constexpr int64_t kWideRowsMinKeys = 128;

// Paged calls (plan/paged_plan.cpp, execute/paged_execute.cpp).
// Rows run as a paged decode call with the causal tail merged (rows-as-decode) from this many
// keys per sequence on average (fewer: the call's extra parts cost more than the row blocks save).
inline constexpr int64_t kDecodeRowsMinKeys = 128;
// GQA decode over a heads-major pool on AVX2 runs through copies of each kv head's keys from
// sequences this long (the paged kernel cannot prefetch v under its predicate; shorter ones are
// read from cache and lose to the copy).
inline constexpr int64_t kHeadsMajorCopyMinKeys = 2048;
// CPU paged decode: key splits until about this many work items per thread (each item pays the
// softmax and its split's output for every head, so on few cores fewer, longer splits win).
inline constexpr int64_t kPagedItemsPerThread = 2;
// The copied-keys route copies about this many bytes at once, whole kv heads (at least one per
// thread): small enough for the attention call after it to read it from cache and for the
// scratch allocator to keep it between calls.
inline constexpr int64_t kCopyBytes = int64_t{8} << 20;
// ... and at most this many where one kv head takes less (under the scratch allocator's largest
// cached block, scratch_allocator.cpp; a bound on memory with many threads).
inline constexpr int64_t kMaxCopyBytes = int64_t{32} << 20;

}  // namespace attention::detail
