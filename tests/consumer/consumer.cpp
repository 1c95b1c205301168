// An application outside the project: it sees only the installed header and library (found through
// find_package(attention) or pkg-config), and checks an SDPA call (grouped-query, bottom-right
// causal, logsumexp out) and an MHA call against naive double loops on fresh random inputs, with
// NaN-poisoned outputs, plus one bad call. Exit status 0 when everything matches.
//
// Built with CONSUMER_GENERATED (consumer_generated), it also links the kernel library
// consumer_kernels that attention_add_kernel_library() generated for the consumer's own targets
// (sdpa): it checks the library registered, that unmasked SDPA calls run its kernels, and their
// results.
#include <attention/attention.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "consumer_checks.h"
#if CONSUMER_GENERATED
#include "consumer_kernels.h"
#endif
#if CONSUMER_APP_PIPELINE
#include <HalideBuffer.h>
#include <HalideRuntime.h>

#include "app_scale.h"
#endif

// The application's own functions named like the library's kernels: these link beside them (the
// kernels are attention::kernels::linear_f32 and so on).
extern "C" int linear_f32(int x) { return x + 1; }
extern "C" int mha_f32(int x) { return 2 * x; }

namespace {

using consumer_checks::expect_close;
using consumer_checks::failures;
using consumer_checks::kPoison;
using consumer_checks::random_values;

// Grouped-query SDPA, bottom-right causal or unmasked.
// `bf16_cache`: k and v stored as BFloat16 (converted with attention::convert_dtype; the
// reference reads the rounded values), q and out fp32.
void check_sdpa(std::mt19937& rng, bool causal, int Sq, const char* what, bool bf16_cache = false) {
  const int B = 2, H = 4, Hkv = 2, Sk = 53, D = 64, Dv = 48;
  const std::vector<float> q = random_values(size_t(B) * H * Sq * D, rng);
  std::vector<float> k = random_values(size_t(B) * Hkv * Sk * D, rng);
  std::vector<float> v = random_values(size_t(B) * Hkv * Sk * Dv, rng);
  std::vector<float> out(size_t(B) * H * Sq * Dv, kPoison), lse(size_t(B) * H * Sq, kPoison);
  attention::SdpaOptions options;
  if (causal) options.mask.causal = attention::Causal::BottomRight;
  options.logsumexp = attention::TensorView::contiguous(lse.data(), {B, H, Sq});
  std::vector<float> qc = q, kc = k, vc = v;  // the API takes float*: keep the inputs pristine
  attention::TensorView kv[2] = {attention::TensorView::contiguous(kc.data(), {B, Hkv, Sk, D}),
                                 attention::TensorView::contiguous(vc.data(), {B, Hkv, Sk, Dv})};
  std::vector<uint16_t> half[2];
  if (bf16_cache) {
    std::vector<float>* rounded[2] = {&k, &v};
    for (int t = 0; t < 2; ++t) {
      const auto n = static_cast<int64_t>(rounded[t]->size());
      half[t].resize(rounded[t]->size());
      const attention::TensorView flat = attention::TensorView::contiguous(rounded[t]->data(), {n});
      const attention::TensorView flat16 =
          attention::TensorView::contiguous(half[t].data(), attention::DType::BFloat16, {n});
      if (!attention::convert_dtype(flat, flat16) || !attention::convert_dtype(flat16, flat)) {
        std::printf("convert_dtype failed\n");
        ++failures;
        return;
      }
      kv[t].data = half[t].data();
      kv[t].dtype = attention::DType::BFloat16;
    }
  }
  const attention::Status status = attention::scaled_dot_product_attention(
      attention::TensorView::contiguous(qc.data(), {B, H, Sq, D}), kv[0], kv[1],
      attention::TensorView::contiguous(out.data(), {B, H, Sq, Dv}), options);
  if (!status) {
    std::printf("scaled_dot_product_attention failed: %s\n", status.message().c_str());
    ++failures;
    return;
  }
  std::vector<double> ref_out(out.size()), ref_lse(lse.size());
  const double scale = 1.0 / std::sqrt(double(D));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const int g = h / (H / Hkv);
      for (int i = 0; i < Sq; ++i) {
        const int last = causal ? i + Sk - Sq : Sk - 1;  // bottom-right: the last query sees all
        std::vector<double> s(Sk, -INFINITY);
        double m = -INFINITY;
        for (int j = 0; j <= last && j < Sk; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) {
            dot += double(q[((size_t(b) * H + h) * Sq + i) * D + d]) *
                   k[((size_t(b) * Hkv + g) * Sk + j) * D + d];
          }
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int j = 0; j < Sk; ++j) sum += s[j] == -INFINITY ? 0 : std::exp(s[j] - m);
        ref_lse[(size_t(b) * H + h) * Sq + i] = m + std::log(sum);
        for (int c = 0; c < Dv; ++c) {
          double acc = 0;
          for (int j = 0; j < Sk; ++j) {
            if (s[j] != -INFINITY) {
              acc += std::exp(s[j] - m) / sum * v[((size_t(b) * Hkv + g) * Sk + j) * Dv + c];
            }
          }
          ref_out[((size_t(b) * H + h) * Sq + i) * Dv + c] = acc;
        }
      }
    }
  }
  expect_close((std::string("SDPA out ") + what).c_str(), out, ref_out);
  expect_close((std::string("SDPA logsumexp ") + what).c_str(), lse, ref_lse);
}

// y [rows, n] = x [rows, m] · Wᵀ [n, m] + bias [n], in double.
std::vector<double> linear(const std::vector<double>& x, int rows, int m,
                           const std::vector<float>& w, const std::vector<float>& bias, int n) {
  std::vector<double> y(size_t(rows) * n);
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < n; ++o) {
      double acc = bias[o];
      for (int i = 0; i < m; ++i) acc += x[size_t(r) * m + i] * w[size_t(o) * m + i];
      y[size_t(r) * n + o] = acc;
    }
  }
  return y;
}

void check_mha(std::mt19937& rng) {
  const int B = 2, S = 29, E = 64, H = 4, D = E / H;
  const std::vector<float> x = random_values(size_t(B) * S * E, rng);
  const std::vector<float> w_in = random_values(size_t(3) * E * E, rng);
  const std::vector<float> b_in = random_values(size_t(3) * E, rng);
  const std::vector<float> w_out = random_values(size_t(E) * E, rng);
  const std::vector<float> b_out = random_values(size_t(E), rng);
  std::vector<float> out(size_t(B) * S * E, kPoison);
  std::vector<float> xc = x, w_inc = w_in, b_inc = b_in, w_outc = w_out, b_outc = b_out;
  attention::MhaWeights weights;
  weights.in_proj_weight = attention::TensorView::contiguous(w_inc.data(), {3 * E, E});
  weights.in_proj_bias = attention::TensorView::contiguous(b_inc.data(), {3 * E});
  weights.out_proj_weight = attention::TensorView::contiguous(w_outc.data(), {E, E});
  weights.out_proj_bias = attention::TensorView::contiguous(b_outc.data(), {E});
  attention::MhaOptions options;
  options.num_heads = H;
  const attention::TensorView xv = attention::TensorView::contiguous(xc.data(), {B, S, E});
  const attention::Status status = attention::multi_head_attention(
      xv, xv, weights, attention::TensorView::contiguous(out.data(), {B, S, E}), options);
  if (!status) {
    std::printf("multi_head_attention failed: %s\n", status.message().c_str());
    ++failures;
    return;
  }
  std::vector<double> ref(out.size());
  const double scale = 1.0 / std::sqrt(double(D));
  for (int b = 0; b < B; ++b) {
    const std::vector<double> xb(x.begin() + size_t(b) * S * E, x.begin() + size_t(b + 1) * S * E);
    const std::vector<double> qkv = linear(xb, S, E, w_in, b_in, 3 * E);  // [S, 3E]: q | k | v
    std::vector<double> heads(size_t(S) * E);
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < S; ++i) {
        std::vector<double> s(S);
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < S; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += qkv[i * 3 * E + h * D + d] * qkv[j * 3 * E + E + h * D + d];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        for (int j = 0; j < S; ++j) sum += std::exp(s[j] - m);
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j < S; ++j)
            acc += std::exp(s[j] - m) / sum * qkv[j * 3 * E + 2 * E + h * D + d];
          heads[size_t(i) * E + h * D + d] = acc;
        }
      }
    }
    const std::vector<double> y = linear(heads, S, E, w_out, b_out, E);
    std::copy(y.begin(), y.end(), ref.begin() + size_t(b) * S * E);
  }
  expect_close("MHA out (self-attention)", out, ref);
}

// A bad shape is refused with a message naming the argument, and nothing is written.
void check_bad_call() {
  std::vector<float> q(2 * 8, 1.0f), k(3 * 4, 1.0f), v(3 * 8, 1.0f), out(2 * 8, kPoison);
  const attention::Status status = attention::scaled_dot_product_attention(
      attention::TensorView::contiguous(q.data(), {1, 1, 2, 8}),
      attention::TensorView::contiguous(k.data(), {1, 1, 3, 4}),  // D = 4, q has 8
      attention::TensorView::contiguous(v.data(), {1, 1, 3, 8}),
      attention::TensorView::contiguous(out.data(), {1, 1, 2, 8}));
  bool untouched = true;
  for (float x : out) untouched = untouched && std::isnan(x);
  const bool ok = !status.ok() && status.code() == attention::StatusCode::InvalidArgument &&
                  status.message().rfind("k:", 0) == 0 && untouched;
  std::printf("%-34s \"%s\": %s\n", "bad call (k's D differs from q's)", status.message().c_str(),
              ok ? "ok" : "FAILED");
  failures += !ok;
}

#if CONSUMER_APP_PIPELINE
struct AppContext {
  int errors = 0;
  std::string last_error;
};

void app_error_handler(void* user_context, const char* message) {
  auto* app = static_cast<AppContext*>(user_context);
  ++app->errors;
  app->last_error = message;
}

// The application's pipeline runs with its context beside the library's calls: its results are
// right, its errors reach its handler with its context, and the library's errors stay Statuses.
void check_app_pipeline(std::mt19937& rng) {
  AppContext app;
  const std::vector<float> x = random_values(64, rng);
  Halide::Runtime::Buffer<float> in(64), out(64), too_long(80);
  for (int i = 0; i < 64; ++i) in(i) = x[i];
  out.fill(kPoison);
  const int good = app_scale(&app, in, out);
  bool right = good == 0;
  for (int i = 0; i < 64; ++i) right = right && out(i) == 2.0f * x[i] + 1.0f;
  const int bad = app_scale(&app, in, too_long);  // reads in beyond its 64 elements
  const bool ok = right && app.errors == 1 && bad != 0 &&
                  app.last_error.find("Input buffer in") != std::string::npos;
  std::printf("%-34s %s; its error \"%s\": %s\n", "application's own Halide pipeline",
              right ? "right" : "WRONG", app.last_error.c_str(), ok ? "ok" : "FAILED");
  failures += !ok;
  check_sdpa(rng, true, 37, "(after the app's error)");
  const bool untouched = app.errors == 1;
  std::printf("%-34s %s\n", "app handler saw no library call", untouched ? "ok" : "FAILED");
  failures += !untouched;
}
#endif

#if CONSUMER_GENERATED
// The kernel explain_sdpa names for an unmasked call of these sizes, k and v of dtype `kv`.
std::string planned_kernel(int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D,
                           attention::DType kv = attention::DType::Float32) {
  const size_t kv_element = kv == attention::DType::Float32 ? 4 : 2;
  std::vector<float> q(B * H * Sq * D), out(q.size());
  std::vector<unsigned char> k(B * H * Sk * D * kv_element), v(k.size());
  std::string plan;
  const attention::Status status = attention::explain_sdpa(
      attention::TensorView::contiguous(q.data(), {B, H, Sq, D}),
      attention::TensorView::contiguous(k.data(), kv, {B, H, Sk, D}),
      attention::TensorView::contiguous(v.data(), kv, {B, H, Sk, D}),
      attention::TensorView::contiguous(out.data(), {B, H, Sq, D}), {}, &plan);
  if (!status.ok()) return "error: " + status.message();
  const size_t at = plan.find(" kernel=");
  return at == std::string::npos ? plan : plan.substr(at + 8, plan.find(' ', at + 8) - (at + 8));
}

// The generated library is registered (or refused, by a CPU that runs none of its targets: the
// built-in kernels then serve) and serves the unmasked SDPA calls, decode over a bf16 cache too.
void check_generated_library() {
  const attention::Status registered = consumer_kernels::register_kernels();
  bool listed = false;
  for (const attention::KernelLibraryInfo& library : attention::kernel_libraries()) {
    std::printf("kernel library %s (%s): %zu kernels, runs %s, %s\n", library.name.c_str(),
                library.targets.c_str(), library.kernels.size(), library.target.c_str(),
                library.status ? "registered" : library.status.message().c_str());
    // A registered library names the one of its targets this CPU runs; a refused one none.
    const bool target_named =
        library.status.ok() ? !library.target.empty() &&
                                  (" " + library.targets + " ").find(" " + library.target + " ") !=
                                      std::string::npos
                            : library.target.empty();
    listed = listed || (library.name == "consumer_kernels" &&
                        library.status.ok() == registered.ok() && target_named);
  }
  const std::string prefill = planned_kernel(2, 4, 37, 53, 64);
  const std::string decode = planned_kernel(2, 4, 1, 53, 64);
  const std::string bf16_decode = planned_kernel(2, 4, 1, 53, 64, attention::DType::BFloat16);
  const bool generated = prefill == "consumer_kernels::sdpa_f32_prefill" &&
                         decode == "consumer_kernels::sdpa_f32_decode" &&
                         bf16_decode == "consumer_kernels::sdpa_bf16kv_decode";
  const bool builtin =
      (prefill + decode + bf16_decode).find("consumer_kernels") == std::string::npos;
  const bool ok =
      listed &&
      (registered.ok() ? generated
                       : registered.code() == attention::StatusCode::Unsupported && builtin);
  std::printf("%-34s %s, %s, %s: %s\n", "generated kernels serve SDPA", prefill.c_str(),
              decode.c_str(), bf16_decode.c_str(), ok ? "ok" : "FAILED");
  failures += !ok;
}
#endif

}  // namespace

int main() {
  std::random_device seed_source;
  const unsigned seed = seed_source();
  std::printf("attention consumer: kernels for %s, seed %u\n",
              attention::cpu_kernel_target().c_str(), seed);
  std::mt19937 rng(seed);
#if CONSUMER_APP_PIPELINE
  // The application's handler goes in first; the library's hooks pass it every other call.
  halide_set_error_handler(app_error_handler);
#endif
  const bool own_functions = linear_f32(1) == 2 && mha_f32(2) == 4;
  std::printf("%-34s %s\n", "own linear_f32 and mha_f32 linked", own_functions ? "ok" : "FAILED");
  failures += !own_functions;
#if CONSUMER_GENERATED
  check_generated_library();
  check_sdpa(rng, false, 37, "(GQA, prefill)");
  check_sdpa(rng, false, 1, "(GQA, decode)");
  check_sdpa(rng, false, 1, "(GQA, decode, bf16 cache)", true);
#endif
  check_sdpa(rng, true, 37, "(GQA, causal)");
  check_mha(rng);
  check_bad_call();
#if CONSUMER_APP_PIPELINE
  check_app_pipeline(rng);
  check_bad_call();
#endif
  std::printf("%s\n", failures == 0 ? "all checks passed" : "SOME CHECKS FAILED");
  return failures == 0 ? 0 : 1;
}
