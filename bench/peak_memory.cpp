// Peak memory of one scaled_dot_product_attention call: prints the process's peak resident set size
// against the size of q+k+v+out. The kernel keeps only per-tile scratch, so the peak should stay
// well under 2x the tensors. Usage: sdpa_peak_memory [B H S D]  (default 1 8 8192 64,
// self-attention).
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "attention/attention.h"

namespace {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;  // Linux reports KiB
}

}  // namespace

int main(int argc, char** argv) {
  int64_t B = 1, H = 8, S = 8192, D = 64;
  if (argc == 5) {
    B = std::atoll(argv[1]), H = std::atoll(argv[2]), S = std::atoll(argv[3]),
    D = std::atoll(argv[4]);
  }
  const size_t n = static_cast<size_t>(B * H * S * D);
  // Filled (not just reserved) so every page is resident before the call.
  std::vector<float> q(n, 0.5f), k(n, 0.25f), v(n, 1.0f), out(n, 0.0f);
  using attention::TensorView;
  const double before = peak_rss_mib();
  const attention::Status status =
      attention::scaled_dot_product_attention(TensorView::contiguous(q.data(), {B, H, S, D}),
                                              TensorView::contiguous(k.data(), {B, H, S, D}),
                                              TensorView::contiguous(v.data(), {B, H, S, D}),
                                              TensorView::contiguous(out.data(), {B, H, S, D}));
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.message().c_str());
    return 1;
  }
  const double tensors = 4.0 * n * sizeof(float) / (1024.0 * 1024.0);
  const double peak = peak_rss_mib();
  std::printf("shape %lldx%lldx%lldx%lld, %d threads\n", (long long)B, (long long)H, (long long)S,
              (long long)D, attention::num_threads());
  std::printf("q+k+v+out:              %8.1f MiB\n", tensors);
  std::printf("peak RSS before call:   %8.1f MiB\n", before);
  std::printf("peak RSS after call:    %8.1f MiB (%.2fx the tensors; the call added %.1f MiB)\n",
              peak, peak / tensors, peak - before);
  return peak < 2.0 * tensors ? 0 : 1;
}
