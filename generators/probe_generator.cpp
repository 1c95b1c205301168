// Two small generators that are built for the same target list as the kernels, so Halide's
// multi-target dispatch picks the same variant for them as for every kernel on a given CPU:
//   - kernel_info: writes the Halide target string of the variant that runs (the runtime's
//     attention::cpu_kernel_target(), so a user or a benchmark can say which ISA ran) and the CPU
//     tilings that variant's kernels were scheduled with (kernel_contract.h; the runtime's key
//     split rules read them);
//   - fma_peak: a register-only multiply-add loop, the arithmetic limit of that variant (the
//     benchmark's "% of FMA peak").
#include <string>

#include "Halide.h"
#include "schedule/cpu.h"

namespace {

using namespace Halide;

// Bytes of kernel_info's name: the longest x86 target string with every feature we use is ~70.
constexpr int kTargetNameBytes = 256;

class KernelInfoGenerator : public Generator<KernelInfoGenerator> {
 public:
  Output<Buffer<uint8_t, 1>> name{"name"};  // NUL-padded target string
  // (field, tiling): CpuTiling::fields() of the prefill (tiling 0) and decode (1) schedules.
  Output<Buffer<int32_t, 2>> tiling{"tiling"};

  void generate() {
    // Build-only features say nothing about the ISA.
    const std::string text = get_target()
                                 .without_feature(Target::NoRuntime)
                                 .without_feature(Target::UserContext)
                                 .without_feature(Target::CPlusPlusMangling)
                                 .to_string();
    std::vector<Expr> bytes;
    for (char c : text) bytes.push_back(cast<uint8_t>(static_cast<uint8_t>(c)));
    bytes.resize(kTargetNameBytes, cast<uint8_t>(0));
    Var i("i");
    name(i) = mux(i, bytes);
    name.dim(0).set_bounds(0, kTargetNameBytes);

    auto fields = [&](bool wide_queries) {
      std::vector<Expr> values;
      for (int field : attention_gen::cpu_tiling(get_target(), wide_queries).fields()) {
        values.push_back(field);
      }
      return values;
    };
    Var f("f"), which("which");
    tiling(f, which) = select(which == 0, mux(f, fields(true)), mux(f, fields(false)));
    tiling.dim(0).set_bounds(0, attention_gen::CpuTiling::kFields);
    tiling.dim(1).set_bounds(0, 2);
  }
};

// checksum(w) = sum over lanes of acc after `iterations` steps of acc = acc·a + b, one work item
// per w (run in parallel). Each step is one FMA (mul + add where the ISA has no FMA) on `chains`
// independent vector registers: enough chains to cover the FMA latency times the FMA ports (4
// cycles × 2 ports on current x86 and ARM cores need 8), few enough to stay in registers.
class FmaPeakGenerator : public Generator<FmaPeakGenerator> {
 public:
  Input<int32_t> iterations{"iterations", 1};
  Input<float> a{"a"};  // pass |a| < 1 and a small b: the chains converge, no overflow or denormals
  Input<float> b{"b"};
  Output<Buffer<float, 1>> checksum{"checksum"};               // (w)
  Output<int32_t> flops_per_iteration{"flops_per_iteration"};  // per work item

  void generate() {
    const Target& t = get_target();
    lanes_ = t.natural_vector_size<float>();
    const bool wide_register_file = t.has_feature(Target::AVX512) || t.arch == Target::ARM;
    chains_ = wide_register_file ? 16 : 12;  // of 32 / 16 vector registers, a and b need two

    step_ = RDom(0, iterations, "step");
    lane_ = RDom(0, chains_ * lanes_, "lane");
    acc_(x_, w_) = cast<float>(x_) * 1e-3f + cast<float>(w_);
    // The step appears only to make it the update's loop; the simplifier proves the term zero.
    acc_(x_, w_) = acc_(x_, w_) * a + (b + select(step_ < 0, 1.0f, 0.0f));
    total_(w_) = 0.0f;
    total_(w_) += acc_(lane_, w_);
    checksum(w_) = total_(w_);
    flops_per_iteration() = 2 * chains_ * lanes_;
  }

  void schedule() {
    checksum.parallel(w_);
    acc_.compute_at(checksum, w_).bound(x_, 0, chains_ * lanes_).store_in(MemoryType::Register);
    acc_.vectorize(x_, lanes_).unroll(x_);
    // The chains innermost: each step issues every chain's FMA back to back.
    acc_.update().reorder(x_, step_).vectorize(x_, lanes_).unroll(x_);
    // Constant indices into the register file: the final sum is unrolled too.
    total_.compute_at(checksum, w_).update().unroll(lane_);
  }

 private:
  Var x_{"x"}, w_{"w"};
  RDom step_, lane_;
  Func acc_{"acc"}, total_{"total"};
  int lanes_ = 0, chains_ = 0;
};

}  // namespace

HALIDE_REGISTER_GENERATOR(KernelInfoGenerator, kernel_info)
HALIDE_REGISTER_GENERATOR(FmaPeakGenerator, fma_peak)
