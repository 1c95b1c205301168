// User mods (attention/generator/mod.h) in sdpa_bench's run, each beside the call a user makes
// without the mod kernel (x86 builds, where the example mods' kernels are built; they are AVX2
// test variants, so on an AVX-512 machine the built-in peers run a wider ISA):
//   - mods/document_mask: 8 documents of random lengths packed into 4096 tokens, through the
//     document_mask mod (block skipping from its scan), against mods/dense_bool_mask: the same
//     call with the equivalent Bool [1, 1, S, S] mask (every key block computed);
//   - mods/causal_mod: the causal mod against mods/causal_builtin: Causal::BottomRight;
//   - mods/window_mod: the sliding_window mod (512 keys back) against mods/window_builtin:
//     Causal::BottomRight with window 512;
//   - mods/alibi_softcap_mod: the alibi_softcap mod (score_mod only: every key) against
//     mods/alibi_softcap_builtin: ALiBi slopes and softcap 30.
// GFLOP/s counts the visible pairs (4·D each) for both rows of a pair, so their ratio is the
// time ratio. Every output is checked once against its peer's before timing.
// ATTENTION_BENCH_ISA=avx2 (sdpa_bench's variant cap) runs the built-in peers at the mod kernels'
// ISA: a same-ISA comparison on an AVX-512 machine.
#include <attention/attention.h>
#include <attention/mod_attention.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "mod_alibi_softcap_prefill.h"
#include "mod_causal_prefill.h"
#include "mod_causal_ranges.h"
#include "mod_document_mask_prefill.h"
#include "mod_document_mask_ranges.h"
#include "mod_sliding_window_prefill.h"
#include "mod_sliding_window_ranges.h"

namespace {

[[noreturn]] void fail(const std::string& message) { bench::fail("sdpa_bench", message); }

constexpr int64_t kB = 1, kH = 8, kS = 4096, kD = 64;
constexpr int64_t kCausalS = 2048;  // the built-in masks' rows
constexpr int64_t kWindow = 512;
constexpr float kSoftcap = 30.0f;

// Each mod row and its peer, the call without the mod kernel, are an even/odd pair.
enum class ModRun {
  kDocumentMod,
  kDenseBoolMask,
  kCausalMod,
  kCausalBuiltin,
  kWindowMod,
  kWindowBuiltin,
  kAlibiSoftcapMod,
  kAlibiSoftcapBuiltin
};
ModRun peer_of(ModRun what) { return static_cast<ModRun>(static_cast<int>(what) ^ 1); }

struct ModProblem {
  int64_t S;
  std::vector<float> q, k, v, out, peer_out;
  std::vector<int32_t> ids;    // document ids [1, S]
  std::vector<uint8_t> dense;  // the same as a Bool [1, 1, S, S] mask
  std::vector<float> slopes;   // ALiBi's, per head
  double document_pairs = 0;   // the documents' visible pairs
};

// 4·D per visible pair of the row's mask.
double flops(const ModProblem& p, ModRun what) {
  double pairs = 0;
  switch (what) {
    case ModRun::kDocumentMod:
    case ModRun::kDenseBoolMask:
      pairs = p.document_pairs;
      break;
    case ModRun::kCausalMod:
    case ModRun::kCausalBuiltin:
      pairs = 0.5 * double(p.S) * double(p.S + 1);
      break;
    case ModRun::kWindowMod:
    case ModRun::kWindowBuiltin:
      for (int64_t i = 0; i < p.S; ++i) pairs += double(std::min(i, kWindow) + 1);
      break;
    case ModRun::kAlibiSoftcapMod:
    case ModRun::kAlibiSoftcapBuiltin:
      pairs = double(p.S) * double(p.S);
      break;
  }
  return 4.0 * kB * kH * pairs * kD;
}

ModProblem make_problem(bool documents) {
  ModProblem p;
  p.S = documents ? kS : kCausalS;
  const int64_t n = kB * kH * p.S * kD;
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (auto* t : {&p.q, &p.k, &p.v}) {
    t->resize(n);
    for (float& x : *t) x = value(rng);
  }
  p.out.assign(n, 0.0f);
  p.peer_out.assign(n, 0.0f);
  if (documents) {
    bench::PackedDocuments packed = bench::packed_documents(p.S, 8, rng);
    p.ids = std::move(packed.ids);
    p.dense = std::move(packed.dense);
    p.document_pairs = packed.pairs;
  }
  for (int64_t h = 0; h < kH; ++h) p.slopes.push_back(std::exp2(-8.0f * float(h + 1) / kH));
  return p;
}

attention::Status run(ModProblem& p, ModRun what, std::vector<float>& out) {
  using attention::TensorView;
  const auto view = [&](std::vector<float>& t) {
    return TensorView::contiguous(t.data(), {kB, kH, p.S, kD});
  };
  attention::SdpaOptions options;
  switch (what) {
    case ModRun::kDocumentMod: {
      const attention::ModKernels kernels{"document_mask",
                                          ATTENTION_MOD_KERNEL(mod_document_mask_prefill),
                                          {},
                                          ATTENTION_MOD_KERNEL(mod_document_mask_ranges)};
      const TensorView ids =
          TensorView::contiguous(p.ids.data(), attention::DType::Int32, {kB, p.S});
      return attention::mod_attention(kernels, view(p.q), view(p.k), view(p.v), view(out),
                                      {attention::ModArgument::of_tensor("document_ids", ids)});
    }
    case ModRun::kCausalMod: {
      const attention::ModKernels kernels{"causal",
                                          ATTENTION_MOD_KERNEL(mod_causal_prefill),
                                          {},
                                          ATTENTION_MOD_KERNEL(mod_causal_ranges)};
      return attention::mod_attention(kernels, view(p.q), view(p.k), view(p.v), view(out), {});
    }
    case ModRun::kWindowMod: {
      const attention::ModKernels kernels{"sliding_window",
                                          ATTENTION_MOD_KERNEL(mod_sliding_window_prefill),
                                          {},
                                          ATTENTION_MOD_KERNEL(mod_sliding_window_ranges)};
      return attention::mod_attention(kernels, view(p.q), view(p.k), view(p.v), view(out),
                                      {attention::ModArgument::of_scalar("window", kWindow)});
    }
    case ModRun::kAlibiSoftcapMod: {
      const attention::ModKernels kernels{
          "alibi_softcap", ATTENTION_MOD_KERNEL(mod_alibi_softcap_prefill), {}, {}};
      const TensorView slopes = TensorView::contiguous(p.slopes.data(), {kH});
      return attention::mod_attention(kernels, view(p.q), view(p.k), view(p.v), view(out),
                                      {attention::ModArgument::of_tensor("slopes", slopes),
                                       attention::ModArgument::of_scalar("softcap", kSoftcap)});
    }
    case ModRun::kDenseBoolMask:
      options.mask.bool_mask =
          TensorView::contiguous(p.dense.data(), attention::DType::Bool, {1, 1, p.S, p.S});
      break;
    case ModRun::kCausalBuiltin:
      options.mask.causal = attention::Causal::BottomRight;
      break;
    case ModRun::kWindowBuiltin:
      options.mask.causal = attention::Causal::BottomRight;
      options.mask.window = kWindow;
      break;
    case ModRun::kAlibiSoftcapBuiltin:
      options.mask.alibi = true;
      options.mask.alibi_slopes = TensorView::contiguous(p.slopes.data(), {kH});
      options.mask.softcap = kSoftcap;
      break;
  }
  return attention::scaled_dot_product_attention(view(p.q), view(p.k), view(p.v), view(out),
                                                 options);
}

void run_mod_bench(benchmark::State& state, ModRun what) {
  const bool documents = what == ModRun::kDocumentMod || what == ModRun::kDenseBoolMask;
  static ModProblem documents_problem = make_problem(true), causal_problem = make_problem(false);
  ModProblem& p = documents ? documents_problem : causal_problem;
  // The pair's two calls agree (once per row, before timing).
  for (auto [kind, out] : {std::pair{what, &p.out}, {peer_of(what), &p.peer_out}}) {
    const attention::Status status = run(p, kind, *out);
    if (!status) fail("mods: " + status.message());
  }
  for (size_t n = 0; n < p.out.size(); ++n) {
    if (!(std::abs(p.out[n] - p.peer_out[n]) <= 1e-4f)) fail("mods: the peers disagree");
  }
  bool all_ok = true;
  for (auto _ : state) {
    all_ok &= run(p, what, p.out).ok();
    benchmark::ClobberMemory();
  }
  if (!all_ok) state.SkipWithError("the call returned an error");
  state.counters["GFLOP/s"] = bench::per_second(flops(p, what) * 1e-9);
}

}  // namespace

namespace bench {

void register_mod_benchmarks() {
  const std::string documents = std::to_string(kB) + "x" + std::to_string(kH) + "x" +
                                std::to_string(kS) + "x" + std::to_string(kD) + "_8docs";
  const std::string causal = std::to_string(kB) + "x" + std::to_string(kH) + "x" +
                             std::to_string(kCausalS) + "x" + std::to_string(kD);
  for (auto [name, what] :
       {std::pair{"mods/document_mask/" + documents, ModRun::kDocumentMod},
        {"mods/dense_bool_mask/" + documents, ModRun::kDenseBoolMask},
        {"mods/causal_mod/" + causal, ModRun::kCausalMod},
        {"mods/causal_builtin/" + causal, ModRun::kCausalBuiltin},
        {"mods/window_mod/" + causal + "_w512", ModRun::kWindowMod},
        {"mods/window_builtin/" + causal + "_w512", ModRun::kWindowBuiltin},
        {"mods/alibi_softcap_mod/" + causal, ModRun::kAlibiSoftcapMod},
        {"mods/alibi_softcap_builtin/" + causal, ModRun::kAlibiSoftcapBuiltin}}) {
    register_timed(name, run_mod_bench, what);
  }
}

}  // namespace bench
