// The main job: runs scaled dot-product attention through the public API on a realistic prefill
// shape and decode shapes (one over a BFloat16 KV cache), checks each against the naive
// double-precision loops, and prints a table of time and GFLOP/s (ours vs the naive loop).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "attention/attention.h"
#include "reference/sdpa_reference.h"

namespace {

struct Shape {
  const char* name;
  int64_t B, H, Hkv, Sq, Sk, D;
  bool bf16_cache = false;  // k and v stored as BFloat16 (q and out fp32)
};

template <typename F>
double seconds(F&& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Best of repeated runs for at least half a second (and 5 runs): the machine is shared and clocks
// ramp up after start, the minimum is the least disturbed figure.
template <typename F>
double best_seconds(F&& run) {
  double best = 1e30, total = 0;
  for (int r = 0; r < 5 || total < 0.5; ++r) {
    const double t = seconds(run);
    best = std::min(best, t);
    total += t;
  }
  return best;
}

bool run_shape(const Shape& s, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto random_tensor = [&](int64_t n) {
    std::vector<float> t(static_cast<size_t>(n));
    for (float& x : t) x = uniform(rng);
    return t;
  };
  std::vector<float> q = random_tensor(s.B * s.H * s.Sq * s.D);
  std::vector<float> k = random_tensor(s.B * s.Hkv * s.Sk * s.D);
  std::vector<float> v = random_tensor(s.B * s.Hkv * s.Sk * s.D);
  std::vector<float> out(static_cast<size_t>(s.B * s.H * s.Sq * s.D), NAN);
  using attention::TensorView;
  const TensorView qv = TensorView::contiguous(q.data(), {s.B, s.H, s.Sq, s.D});
  const TensorView kv = TensorView::contiguous(k.data(), {s.B, s.Hkv, s.Sk, s.D});
  const TensorView vv = TensorView::contiguous(v.data(), {s.B, s.Hkv, s.Sk, s.D});
  const TensorView ov = TensorView::contiguous(out.data(), {s.B, s.H, s.Sq, s.D});
  // A BFloat16 cache: the call reads k16 and v16; k and v become their values (the reference's).
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  TensorView call_k = kv, call_v = vv;
  if (s.bf16_cache) {
    for (auto [wide, half] : {std::pair{kv, &k16}, {vv, &v16}}) {
      const TensorView narrow =
          TensorView::contiguous(half->data(), attention::DType::BFloat16, {s.B, s.Hkv, s.Sk, s.D});
      if (!attention::convert_dtype(wide, narrow) || !attention::convert_dtype(narrow, wide)) {
        std::printf("%s: error: convert_dtype failed\n", s.name);
        return false;
      }
      (half == &k16 ? call_k : call_v) = narrow;
    }
  }

  attention::Status status = attention::scaled_dot_product_attention(qv, call_k, call_v, ov);
  if (!status.ok()) {
    std::printf("%s: error: %s\n", s.name, status.message().c_str());
    return false;
  }
  const double ours =
      best_seconds([&] { attention::scaled_dot_product_attention(qv, call_k, call_v, ov); });
  std::vector<double> expected;
  const double naive = seconds(
      [&] { reference_sdpa(qv, kv, vv, 1.0 / std::sqrt(double(s.D)), &expected, nullptr); });
  double max_err = 0, max_ref = 0;
  for (size_t n = 0; n < expected.size(); ++n) {
    max_err = std::max(max_err, std::abs(out[n] - expected[n]));  // NaN fails the check below
    if (std::isnan(out[n])) max_err = INFINITY;
    max_ref = std::max(max_ref, std::abs(expected[n]));
  }
  const bool ok = max_err <= 2e-5 * std::max(1.0, max_ref);
  const double gflop = 4.0 * s.B * s.H * s.Sq * s.Sk * s.D * 1e-9;
  std::printf("| %-28s | %9.2f | %9.1f | %9.1f | %7.1f | %7.0fx | %.1e %s |\n", s.name, ours * 1e3,
              gflop / ours, gflop / naive, naive * 1e3, naive / ours, max_err, ok ? "ok" : "FAIL");
  return ok;
}

}  // namespace

int main() {
  const Shape shapes[] = {
      {"prefill 1x8x1024x1024x64", 1, 8, 8, 1024, 1024, 64},
      {"GQA 1x16(4)x512x512x128", 1, 16, 4, 512, 512, 128},
      {"decode 1x32x1x4096x128", 1, 32, 32, 1, 4096, 128},
      {"decode, bf16 KV cache", 1, 32, 32, 1, 4096, 128, true},
  };
  std::mt19937 rng(2024);
  std::printf("scaled_dot_product_attention, fp32 (last row: BFloat16 k and v), %d threads\n\n",
              attention::num_threads());
  std::printf("| %-28s | %9s | %9s | %9s | %7s | %8s | %s |\n", "shape (B x H x Sq x Sk x D)",
              "ours ms", "GFLOP/s", "naive GF/s", "naive ms", "speedup", "max error");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|\n", "------------------------------", "-----------",
              "-----------", "-----------", "---------", "----------", "-------------");
  bool ok = true;
  for (const Shape& s : shapes) ok = run_shape(s, rng) && ok;
  return ok ? 0 : 1;
}
