// The tuner's measuring process (tools/attention-tune drives it): loads candidate SDPA kernels
// (shared objects the generator built without a Halide runtime, so all of them run on this
// executable's one runtime and thread pool), checks each against a double-precision reference on
// fresh random inputs, then times them interleaved and prints one JSON line per candidate.
//
//   tune_harness --info INFO.so --shape B,H,Sq,Sk,D [--masked] [--rounds N] [--min-ms M]
//                [--rotate-mib M]
//                CANDIDATE.so[:key=value,...] ...
//
// INFO.so is the kernel_info generator built for the candidates' target (the default tilings the
// parameters override); a candidate's parameters are the GeneratorParams it was built with
// (query_tiling and the tiling parameters of kernel_contract.h), which fix its key split.
// Helpers for the tuner: --print-target (the variant this CPU runs), --info INFO.so
// --print-tilings (its default tilings), --bucket B,H,Sq,Sk,D [--masked] (the shape's bucket).
#include <HalideBuffer.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "call/mask_args.h"
#include "kernel_contract.h"
#include "kernels/halide_view.h"
#include "sdpa_f32_masked_prefill.h"
#include "sdpa_f32_prefill.h"

namespace {

using attention::MaskOptions;
using attention::TensorView;
using attention_contract::CpuTiling;
using PlainFn = decltype(&attention::kernels::sdpa_f32_prefill);
using MaskedFn = decltype(&attention::kernels::sdpa_f32_masked_prefill);
using InfoFn = int (*)(void*, halide_buffer_t*, halide_buffer_t*);

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "tune_harness: %s\n", message.c_str());
  std::exit(2);
}

void* load(const std::string& path, const char* symbol) {
  // RTLD_LOCAL: every candidate defines the same symbol; each handle resolves its own.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) fail("cannot load " + path + ": " + dlerror());
  void* fn = dlsym(handle, symbol);
  if (fn == nullptr) fail(path + " has no function " + symbol);
  return fn;
}

struct Shape {
  int64_t B, H, Sq, Sk, D;
  double flops() const { return 4.0 * B * H * Sq * Sk * D; }  // Q·Kᵀ and P·V, 2 flops per MAC
};

struct Candidate {
  std::string path;
  std::map<std::string, std::string> params;
  void* fn = nullptr;
  bool prefill = true;
  int32_t key_split = 0;
  std::string error;
  double max_error = 0;
  std::vector<double> seconds;  // per call, one entry per round
};

Candidate parse_candidate(const std::string& spec) {
  Candidate c;
  const size_t colon = spec.find(':');
  c.path = spec.substr(0, colon);
  if (colon == std::string::npos) return c;
  std::stringstream items(spec.substr(colon + 1));
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) fail("candidate parameter '" + item + "' is not key=value");
    c.params[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return c;
}

// The tilings kernel_info reports for its target: prefill (0) and decode (1).
std::array<CpuTiling, 2> default_tilings(const std::string& info_path) {
  const auto info = reinterpret_cast<InfoFn>(load(info_path, "tune_info"));
  Halide::Runtime::Buffer<uint8_t> name(256);
  Halide::Runtime::Buffer<int32_t> tiling(CpuTiling::kFields, 2);
  if (info(nullptr, name.raw_buffer(), tiling.raw_buffer()) != 0) fail("kernel_info failed");
  std::array<CpuTiling, 2> result;
  for (int which = 0; which < 2; ++which) {
    std::array<int, CpuTiling::kFields> fields{};
    for (int f = 0; f < CpuTiling::kFields; ++f) fields[f] = tiling(f, which);
    result[which] = CpuTiling::from_fields(fields);
  }
  return result;
}

// The candidate's kernel variant and its key split for `s`, from the tiling it was built with.
void plan_candidate(Candidate& c, const std::array<CpuTiling, 2>& defaults, const Shape& s) {
  const auto tiling_param = c.params.find("query_tiling");
  c.prefill = tiling_param == c.params.end() || tiling_param->second != "decode";
  std::array<int, attention_contract::kCpuTilingParamCount> values{};
  for (int i = 0; i < attention_contract::kCpuTilingParamCount; ++i) {
    const auto found = c.params.find(attention_contract::kCpuTilingParams[i].name);
    if (found != c.params.end()) values[i] = std::atoi(found->second.c_str());
  }
  const CpuTiling t = attention_contract::with_overrides(defaults[c.prefill ? 0 : 1], values);
  c.key_split = c.prefill ? attention_contract::prefill_key_split(s.Sk, t)
                          : attention_contract::decode_key_split(s.B, s.H, s.Sk, t);
}

struct Problem {
  Shape s;
  bool masked;
  // k and v hold `copies` KV caches back to back; a call reads copy `copy`. Decode reads its KV
  // cache once per call: cycling through more than the caches hold times the memory, as serving
  // does (and as bench/sdpa_bench.cpp does).
  int copies = 1, copy = 0;
  std::vector<float> q, k, v, out, lse;
  MaskOptions mask;
  float scale;
};

attention::Status run(Candidate& c, Problem& p) {
  const Shape& s = p.s;
  const size_t kv = static_cast<size_t>(s.B * s.H * s.Sk * s.D) * p.copy;
  attention::detail::HalideView hq(TensorView::contiguous(p.q.data(), {s.B, s.H, s.Sq, s.D})),
      hk(TensorView::contiguous(p.k.data() + kv, {s.B, s.H, s.Sk, s.D})),
      hv(TensorView::contiguous(p.v.data() + kv, {s.B, s.H, s.Sk, s.D})),
      hout(TensorView::contiguous(p.out.data(), {s.B, s.H, s.Sq, s.D})),
      hlse(TensorView::contiguous(p.lse.data(), {s.B, s.H, s.Sq}),
           attention::detail::RowStats{s.D});
  const auto inputs = std::tuple(hq.get(), hk.get(), hv.get(), p.scale);
  const auto outputs = std::tuple(c.key_split, hout.get(), hlse.get());
  if (!p.masked) {
    return attention::detail::run_kernel_parts(c.path.c_str(), reinterpret_cast<PlainFn>(c.fn),
                                               inputs, outputs);
  }
  attention::detail::MaskArgs mask(p.mask, s.B, s.H, s.Sq, s.Sk);
  return attention::detail::run_kernel_parts(c.path.c_str(), reinterpret_cast<MaskedFn>(c.fn),
                                             inputs, mask.arguments(/*values_finite=*/true),
                                             outputs);
}

// Relative error of sampled rows against a double-precision reference (causal when masked), and
// every output written: the output is poisoned with NaN before the call.
double check(Candidate& c, Problem& p) {
  const Shape& s = p.s;
  p.copy = 0;
  std::fill(p.out.begin(), p.out.end(), std::numeric_limits<float>::quiet_NaN());
  const attention::Status status = run(c, p);
  if (!status.ok()) {
    c.error = status.message();
    return 0;
  }
  for (float x : p.out) {
    if (!std::isfinite(x)) {
      c.error = "output element not written (NaN poison left) or not finite";
      return 0;
    }
  }
  const std::vector<int64_t> rows = {0, s.Sq / 3, s.Sq / 2, s.Sq - 1};
  double worst = 0;
  std::vector<double> score(s.Sk), acc(s.D);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      for (int64_t i : rows) {
        const float* q = &p.q[((b * s.H + h) * s.Sq + i) * s.D];
        const int64_t keys = p.masked ? std::min(s.Sk, i + 1) : s.Sk;  // causal, top-left
        double top = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < keys; ++j) {
          const float* k = &p.k[((b * s.H + h) * s.Sk + j) * s.D];
          double dot = 0;
          for (int64_t d = 0; d < s.D; ++d) dot += static_cast<double>(q[d]) * k[d];
          score[j] = dot * p.scale;
          top = std::max(top, score[j]);
        }
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < keys; ++j) {
          const double w = std::exp(score[j] - top);
          sum += w;
          const float* v = &p.v[((b * s.H + h) * s.Sk + j) * s.D];
          for (int64_t d = 0; d < s.D; ++d) acc[d] += w * v[d];
        }
        double err = 0, norm = 0;
        const float* out = &p.out[((b * s.H + h) * s.Sq + i) * s.D];
        for (int64_t d = 0; d < s.D; ++d) {
          const double ref = acc[d] / sum;
          err += (out[d] - ref) * (out[d] - ref);
          norm += ref * ref;
        }
        worst = std::max(worst, std::sqrt(err / std::max(norm, 1e-30)));
      }
    }
  }
  if (worst > 1e-4) c.error = "relative error " + std::to_string(worst) + " above 1e-4";
  return worst;
}

double seconds_of(Candidate& c, Problem& p, int calls) {
  const auto start = std::chrono::steady_clock::now();
  for (int n = 0; n < calls; ++n) {
    p.copy = (p.copy + 1) % p.copies;
    if (!run(c, p).ok()) return std::numeric_limits<double>::infinity();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string info_path, shape_text;
  Problem p{};
  int rounds = 7;
  double min_ms = 30;
  double rotate_mib = 256;
  bool print_tilings = false, bucket_only = false;
  std::vector<Candidate> candidates;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    const auto value = [&]() -> std::string {
      if (a + 1 >= argc) fail(arg + " needs a value");
      return argv[++a];
    };
    if (arg == "--info") {
      info_path = value();
    } else if (arg == "--shape") {
      shape_text = value();
    } else if (arg == "--masked") {
      p.masked = true;
    } else if (arg == "--rounds") {
      rounds = std::max(1, std::atoi(value().c_str()));
    } else if (arg == "--min-ms") {
      min_ms = std::atof(value().c_str());
    } else if (arg == "--rotate-mib") {
      rotate_mib = std::atof(value().c_str());
    } else if (arg == "--print-tilings") {
      print_tilings = true;
    } else if (arg == "--bucket") {
      bucket_only = true;
      shape_text = value();
    } else if (arg == "--print-target") {
      std::printf("%s\n", attention::cpu_kernel_target().c_str());
      return 0;
    } else if (arg.rfind("--", 0) == 0) {
      fail("unknown option " + arg);
    } else {
      candidates.push_back(parse_candidate(arg));
    }
  }
  if (print_tilings) {  // the target's default prefill then decode CpuTiling fields
    if (info_path.empty()) fail("--print-tilings needs --info");
    for (const CpuTiling& t : default_tilings(info_path)) {
      for (int field : t.fields()) std::printf("%d ", field);
    }
    std::printf("\n");
    return 0;
  }
  Shape& s = p.s;
  if (std::sscanf(shape_text.c_str(), "%ld,%ld,%ld,%ld,%ld", &s.B, &s.H, &s.Sq, &s.Sk, &s.D) != 5 ||
      s.B < 1 || s.H < 1 || s.Sq < 1 || s.Sk < 1 || s.D < 1) {
    fail("--shape must be B,H,Sq,Sk,D (all >= 1), got '" + shape_text + "'");
  }
  if (bucket_only) {
    std::printf("%s\n", attention_contract::shape_bucket(s.Sq, s.Sk, s.D, p.masked).c_str());
    return 0;
  }
  if (info_path.empty() || candidates.empty()) fail("need --info and at least one candidate");

  const auto defaults = default_tilings(info_path);
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const double kv_bytes = 2.0 * s.B * s.H * s.Sk * s.D * sizeof(float);
  if (!attention_contract::use_prefill(s.Sq)) {
    p.copies = std::max(1, static_cast<int>(std::ceil(rotate_mib * (1 << 20) / kv_bytes)));
  }
  for (auto* x : {&p.q, &p.k, &p.v}) {
    x->resize(static_cast<size_t>(s.B * s.H * (x == &p.q ? s.Sq : s.Sk * p.copies) * s.D));
    for (float& e : *x) e = uniform(rng);
  }
  p.out.resize(static_cast<size_t>(s.B * s.H * s.Sq * s.D));
  p.lse.resize(static_cast<size_t>(s.B * s.H * s.Sq));
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  if (p.masked) p.mask.causal = attention::Causal::TopLeft;
  // A causal call does about half the work; GFLOP/s counts the work done.
  const double flops = p.masked ? s.flops() * 0.5 : s.flops();

  // Load and check all before timing any, so a failure cannot disturb the timed rounds.
  int calls = 1;
  for (Candidate& c : candidates) {
    c.fn = load(c.path, "tune_kernel");
    plan_candidate(c, defaults, s);
    c.max_error = check(c, p);
    if (!c.error.empty()) continue;
    const double once = seconds_of(c, p, 1);  // warm-up, and the call count of a timed batch
    calls = std::max(calls, static_cast<int>(std::ceil(min_ms * 1e-3 / std::max(once, 1e-9))));
  }
  calls = std::min(calls, 1000);
  // Interleaved rounds, the order rotated each round: drift and noise hit every candidate alike.
  for (int r = 0; r < rounds; ++r) {
    for (size_t n = 0; n < candidates.size(); ++n) {
      Candidate& c = candidates[(n + r) % candidates.size()];
      if (c.error.empty()) c.seconds.push_back(seconds_of(c, p, calls));
    }
  }
  std::printf("{\"bucket\": \"%s\", \"flops\": %.6g, \"calls_per_round\": %d, \"kv_copies\": %d}\n",
              attention_contract::shape_bucket(s.Sq, s.Sk, s.D, p.masked).c_str(), flops, calls,
              p.copies);
  for (size_t n = 0; n < candidates.size(); ++n) {
    const Candidate& c = candidates[n];
    std::string error = c.error;
    for (char& ch : error) ch = ch == '"' || ch == '\n' ? '\'' : ch;
    if (!error.empty()) {
      std::printf("{\"index\": %zu, \"ok\": false, \"error\": \"%s\"}\n", n, error.c_str());
      continue;
    }
    const double t = median(c.seconds);
    std::printf(
        "{\"index\": %zu, \"ok\": true, \"median_s\": %.6g, \"gflops\": %.4g, \"max_rel_error\": "
        "%.3g, \"key_split\": %d}\n",
        n, t, flops / t * 1e-9, c.max_error, c.key_split);
  }
  return 0;
}
