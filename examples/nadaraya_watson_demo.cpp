// The classic Nadaraya–Watson demo on the generated kernels: 100 noisy samples of
// y = 2 sin(x) + x on [0, 4] are the keys and values, a grid of 200 points the queries. Each kernel
// regresses the grid at a few bandwidths; the program prints each fit's RMS error against the
// noise-free curve, checks every fit against the double-precision reference loops, and writes
// into the output folder (argument 1, default "."; created if missing):
//   nadaraya_watson_fits.dat   the grid, the truth and every fit (columns), for any plotting tool
//   nadaraya_watson_fits.png   the fits against the samples, drawn by gnuplot if it is installed
//   nadaraya_watson_weights.png  the Gaussian fit's attention weights, grid point (row) by sample
//                                (column), through libpng (Halide's image I/O header)
// The weights come from the same kernel: with the identity matrix as values, each output row is
// the query's weights. Exit status 1 if a fit disagrees with the reference or a file cannot be
// written.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "HalideBuffer.h"
#include "attention/attention.h"
#include "halide_image_io.h"
#include "reference/kernel_regression_reference.h"

namespace {

constexpr int kSamples = 100;
constexpr int kGrid = 200;
constexpr float kLow = 0.0f, kHigh = 4.0f;

float truth(float x) { return 2.0f * std::sin(x) + x; }

struct Fit {
  const char* kernel_name;
  attention::RegressionKernel kernel;
  float bandwidth;
  std::vector<float> y;               // at the grid
  std::vector<float> log_weight_sum;  // -inf: no sample within reach (y is 0 there)
};

using attention::TensorView;

// out [1, Sq, Dv] = the regression of `values` [1, Sk, Dv] at the 1-D `queries`, with log Σ_j f
// per query; false (and a message) if the call fails or disagrees with the reference loops.
bool regress(const std::vector<float>& queries, const std::vector<float>& keys,
             const std::vector<float>& values, int64_t value_dim,
             attention::RegressionKernel kernel, float bandwidth, std::vector<float>& out,
             std::vector<float>& log_weight_sum) {
  const int64_t sq = static_cast<int64_t>(queries.size()), sk = static_cast<int64_t>(keys.size());
  out.assign(static_cast<size_t>(sq * value_dim), NAN);
  log_weight_sum.assign(static_cast<size_t>(sq), NAN);
  const TensorView q = TensorView::contiguous(const_cast<float*>(queries.data()), {1, sq, 1});
  const TensorView k = TensorView::contiguous(const_cast<float*>(keys.data()), {1, sk, 1});
  const TensorView v =
      TensorView::contiguous(const_cast<float*>(values.data()), {1, sk, value_dim});
  attention::KernelRegressionOptions options;
  options.kernel = kernel;
  options.bandwidth = bandwidth;
  options.log_weight_sum = TensorView::contiguous(log_weight_sum.data(), {1, sq});
  const attention::Status status = attention::nadaraya_watson_attention(
      q, k, v, TensorView::contiguous(out.data(), {1, sq, value_dim}), options);
  if (!status.ok()) {
    std::fprintf(stderr, "nadaraya_watson_attention: %s\n", status.message().c_str());
    return false;
  }
  std::vector<double> expected, expected_lws;
  reference_nadaraya_watson(q, k, v, kernel, bandwidth, &expected, &expected_lws);
  double worst = 0.0;
  for (size_t n = 0; n < out.size(); ++n) worst = std::max(worst, std::abs(out[n] - expected[n]));
  for (size_t n = 0; n < log_weight_sum.size(); ++n) {
    const bool unreached = std::isinf(expected_lws[n]);
    if (unreached != (std::isinf(log_weight_sum[n]) && log_weight_sum[n] < 0)) worst = INFINITY;
    if (!unreached) worst = std::max(worst, std::abs(log_weight_sum[n] - expected_lws[n]));
  }
  // The samples lie on no grid, so no boxcar distance sits within rounding of the bandwidth.
  if (!(worst <= 1e-4)) {
    std::fprintf(stderr, "fit differs from the reference loops by %g\n", worst);
    return false;
  }
  return true;
}

// The weight matrix as an image: white (0) to dark red (the largest weight), each cell a 3 × 3
// block so the 200 × 100 matrix is visible at a glance.
bool write_heatmap(const std::vector<float>& weights, const std::string& path) {
  constexpr int kCell = 3;
  const float top = *std::max_element(weights.begin(), weights.end());
  Halide::Runtime::Buffer<uint8_t> image(kSamples * kCell, kGrid * kCell, 3);
  for (int row = 0; row < kGrid; ++row) {
    for (int col = 0; col < kSamples; ++col) {
      const float t = top > 0.0f ? weights[row * kSamples + col] / top : 0.0f;
      const uint8_t rgb[3] = {static_cast<uint8_t>(255 - 95 * t),
                              static_cast<uint8_t>(255 * (1.0f - t)),
                              static_cast<uint8_t>(255 * (1.0f - t))};
      for (int y = row * kCell; y < (row + 1) * kCell; ++y)
        for (int x = col * kCell; x < (col + 1) * kCell; ++x)
          for (int c = 0; c < 3; ++c) image(x, y, c) = rgb[c];
    }
  }
  return Halide::Tools::save(image, path);
}

// gnuplot draws the fits from the .dat file; skipped (with a note) where gnuplot is missing.
void plot_fits(const std::vector<Fit>& fits, const std::string& dir) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    std::printf("gnuplot not found: %s/nadaraya_watson_fits.png not drawn\n", dir.c_str());
    return;
  }
  const std::string script = dir + "/nadaraya_watson_fits.gp";
  FILE* gp = std::fopen(script.c_str(), "w");
  if (gp == nullptr) return;
  std::fprintf(gp,
               "set terminal png size 1500,500\nset output '%s/nadaraya_watson_fits.png'\n"
               "set multiplot layout 1,3\nset key top left\nset xrange [0:4]\n",
               dir.c_str());
  for (int k = 0; k < 3; ++k) {
    std::fprintf(gp,
                 "set title '%s kernel'\nplot '%s/nadaraya_watson_samples.dat' with points pt 7 "
                 "ps 0.5 lc rgb '#999999' title 'samples', '%s/nadaraya_watson_fits.dat' using 1:2 "
                 "with lines lw 2 lc rgb 'black' title 'truth'",
                 fits[k * 3].kernel_name, dir.c_str(), dir.c_str());
    for (int f = k * 3; f < k * 3 + 3; ++f) {
      std::fprintf(gp, ", '' using 1:%d with lines lw 2 title 'h = %g'", f + 3, fits[f].bandwidth);
    }
    std::fprintf(gp, "\n");
  }
  std::fprintf(gp, "unset multiplot\n");
  std::fclose(gp);
  const std::string command = "gnuplot '" + script + "'";
  if (std::system(command.c_str()) != 0) std::printf("gnuplot failed on %s\n", script.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);  // a failure shows when the files are written
  std::mt19937 rng(2024);
  std::uniform_real_distribution<float> position(kLow, kHigh);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  std::vector<float> x(kSamples), y(kSamples), grid(kGrid);
  for (float& xi : x) xi = position(rng);
  std::sort(x.begin(), x.end());
  for (int n = 0; n < kSamples; ++n) y[n] = truth(x[n]) + noise(rng);
  for (int n = 0; n < kGrid; ++n) grid[n] = kLow + (kHigh - kLow) * n / (kGrid - 1);

  const std::pair<const char*, attention::RegressionKernel> kernels[] = {
      {"Gaussian", attention::RegressionKernel::Gaussian},
      {"boxcar", attention::RegressionKernel::Boxcar},
      {"Epanechnikov", attention::RegressionKernel::Epanechnikov}};
  const float bandwidths[] = {0.1f, 0.3f, 1.0f};
  std::vector<Fit> fits;
  std::printf("Nadaraya-Watson regression of y = 2 sin(x) + x from %d noisy samples (sd 0.5)\n",
              kSamples);
  std::printf("%-14s %10s %12s %10s\n", "kernel", "bandwidth", "RMS error", "unreached");
  for (const auto& [name, kernel] : kernels) {
    for (float h : bandwidths) {
      Fit fit{name, kernel, h, {}, {}};
      if (!regress(grid, x, y, 1, kernel, h, fit.y, fit.log_weight_sum)) return 1;
      // The error over the grid points some sample reaches; the others are counted apart.
      double squares = 0.0;
      int reached = 0;
      for (int n = 0; n < kGrid; ++n) {
        if (std::isinf(fit.log_weight_sum[n])) continue;
        squares += std::pow(fit.y[n] - truth(grid[n]), 2);
        ++reached;
      }
      std::printf("%-14s %10.2f %12.4f %10d\n", name, h, std::sqrt(squares / std::max(reached, 1)),
                  kGrid - reached);
      fits.push_back(std::move(fit));
    }
  }

  FILE* samples = std::fopen((dir + "/nadaraya_watson_samples.dat").c_str(), "w");
  FILE* table = std::fopen((dir + "/nadaraya_watson_fits.dat").c_str(), "w");
  if (samples == nullptr || table == nullptr) {
    std::fprintf(stderr, "cannot write into %s\n", dir.c_str());
    return 1;
  }
  for (int n = 0; n < kSamples; ++n) std::fprintf(samples, "%g %g\n", x[n], y[n]);
  std::fprintf(table, "# x truth");
  for (const Fit& f : fits) std::fprintf(table, " %s_h%g", f.kernel_name, f.bandwidth);
  std::fprintf(table, "\n");
  for (int n = 0; n < kGrid; ++n) {
    std::fprintf(table, "%g %g", grid[n], truth(grid[n]));
    // A grid point no sample reaches is left blank ("NaN"), so the plot shows a gap, not a 0.
    for (const Fit& f : fits) {
      if (std::isinf(f.log_weight_sum[n])) {
        std::fprintf(table, " NaN");
      } else {
        std::fprintf(table, " %g", f.y[n]);
      }
    }
    std::fprintf(table, "\n");
  }
  std::fclose(samples);
  std::fclose(table);
  plot_fits(fits, dir);

  // Attention weights of the Gaussian fit at h = 0.3: values = identity, so out row i = weights.
  std::vector<float> identity(kSamples * kSamples, 0.0f), weights, log_weight_sum;
  for (int n = 0; n < kSamples; ++n) identity[n * kSamples + n] = 1.0f;
  if (!regress(grid, x, identity, kSamples, attention::RegressionKernel::Gaussian, 0.3f, weights,
               log_weight_sum)) {
    return 1;
  }
  const std::string heatmap = dir + "/nadaraya_watson_weights.png";
  if (!write_heatmap(weights, heatmap)) {
    std::fprintf(stderr, "cannot write %s\n", heatmap.c_str());
    return 1;
  }
  std::printf("wrote %s/nadaraya_watson_fits.{dat,png} and %s\n", dir.c_str(), heatmap.c_str());
  return 0;
}
