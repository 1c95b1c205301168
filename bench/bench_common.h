// What every benchmark driver of this project shares: the thread count and the run's setup.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "attention/attention.h"

namespace bench {

// Prints the message and aborts: a benchmark that cannot run as asked must not report numbers.
[[noreturn]] inline void fail(const char* program, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program, message.c_str());
  std::abort();
}

// ATTENTION_BENCH_THREADS, else all hardware threads; read once.
inline int threads() {
  static const int n = [] {
    const char* env = std::getenv("ATTENTION_BENCH_THREADS");
    if (env == nullptr || *env == '\0')
      return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    char* end = nullptr;
    const long parsed = std::strtol(env, &end, 10);
    if (*end != '\0' || parsed < 1 || parsed > 4096)
      fail("bench", std::string("ATTENTION_BENCH_THREADS=") + env + " is not a thread count");
    return static_cast<int>(parsed);
  }();
  return n;
}

// Google Benchmark's flags, then our kernels' thread count (recorded in the run's context).
// False when an argument is not understood.
inline bool initialize(int* argc, char** argv) {
  benchmark::Initialize(argc, argv);
  if (benchmark::ReportUnrecognizedArguments(*argc, argv)) return false;
  attention::set_num_threads(threads());
  benchmark::AddCustomContext("threads", std::to_string(threads()));
  return true;
}

// A rate counter: amount_per_iteration per second (e.g. GFLOP per call -> GFLOP/s).
inline benchmark::Counter per_second(double amount_per_iteration) {
  return benchmark::Counter(amount_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                            benchmark::Counter::kIs1000);
}

// Registers fn(state, arg) under name, timed in wall-clock milliseconds after a warm-up: thread
// pools start, caches and scratch allocations settle, clocks ramp up; without it the first
// benchmark of a run read up to 30% low.
template <typename Fn, typename Arg>
void register_timed(const std::string& name, Fn fn, Arg arg) {
  benchmark::RegisterBenchmark(name.c_str(), fn, arg)
      ->UseRealTime()
      ->MinWarmUpTime(0.3)
      ->Unit(benchmark::kMillisecond);
}

// `documents` documents packed into S tokens (cut points drawn uniformly in (0, S) from `rng`):
// each token's document id, the equivalent Bool [S, S] mask (a query sees the keys of its own
// document) and the visible pairs. The document-mask rows of sdpa_bench's and gpu_bench's mods/.
struct PackedDocuments {
  std::vector<int32_t> ids;
  std::vector<uint8_t> dense;
  double pairs = 0;
};

template <typename Rng>
PackedDocuments packed_documents(int64_t S, int documents, Rng& rng) {
  std::vector<int64_t> cuts = {0, S};
  std::uniform_int_distribution<int64_t> cut(1, S - 1);
  while (cuts.size() < static_cast<size_t>(documents) + 1) {
    const int64_t c = cut(rng);
    if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
  }
  std::sort(cuts.begin(), cuts.end());
  PackedDocuments p;
  p.ids.resize(static_cast<size_t>(S));
  for (size_t d = 0; d + 1 < cuts.size(); ++d) {
    std::fill(p.ids.begin() + cuts[d], p.ids.begin() + cuts[d + 1], static_cast<int32_t>(d));
    p.pairs += double(cuts[d + 1] - cuts[d]) * double(cuts[d + 1] - cuts[d]);
  }
  p.dense.resize(static_cast<size_t>(S * S));
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) p.dense[i * S + j] = p.ids[i] == p.ids[j];
  return p;
}

// sdpa_bench's multi-head attention rows (mha_bench.cpp).
void register_mha_benchmarks();
// sdpa_bench's serving-path rows: packed variable-length batches and paged KV (serving_bench.cpp).
void register_serving_benchmarks();
// sdpa_bench's user-mod rows (mod_bench.cpp; x86 builds, where the example mods' kernels exist).
void register_mod_benchmarks();

}  // namespace bench
