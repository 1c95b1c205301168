// Generator for element type conversions of a 4-D tensor between float32 and a half type
// (float16, bfloat16): the runtime widens half operands for the kernels that take fp32 and
// rounds fp32 results into half outputs, once, at the end (round to nearest even; values beyond
// float16's range become ±inf, NaN stays NaN). GPU targets (CUDA, OpenCL) take and write the half
// side as raw UInt(16) bits, converted in integer operations (algorithm/bfloat16.h) to the same
// results.
#include "Halide.h"
#include "algorithm/bfloat16.h"

namespace {

using namespace Halide;

class ConvertGenerator : public Generator<ConvertGenerator> {
 public:
  GeneratorParam<Type> from{"from", Float(16)};
  GeneratorParam<Type> to{"to", Float(32)};

  // in (x, y, z, w) at any outer strides; out the same shape, at its own strides.
  void configure() {
    in_ = add_input<Buffer<>>("in", attention_gen::stored_type(from, get_target()), 4);
    out_ = add_output<Buffer<>>("out", attention_gen::stored_type(to, get_target()), 4);
  }

  void generate() {
    Func in = *in_;
    Expr value = in(x, y, z, w);
    const Type to_type = to;
    if (get_target().has_gpu_feature()) {
      value = from == Float(32) ? attention_gen::float_to_half_bits(value, to_type)
                                : attention_gen::half_bits_to_float(value, Type(from));
    } else if (from == Float(32) && to_type.bits() == 16) {
      // NaN by hand: Halide's emulated conversions (bfloat16 always, float16 without F16C) round
      // a NaN's bits like a number's, so NaNs became ±inf (or -0). bfloat16 is rounded by hand
      // too (to nearest even); float16 keeps the cast's rounding.
      if (to_type.is_bfloat()) {
        value = attention_gen::round_to_bfloat16(value);
      } else {
        Expr bits = reinterpret<uint32_t>(value);
        Expr is_nan = (bits & 0x7fffffff) > 0x7f800000;
        Expr nan16 = ((bits >> 16) & 0x8000) | 0x7e00 | ((bits >> 13) & 0x3ff);
        Expr number16 = reinterpret<uint16_t>(cast(to_type, value));
        value =
            reinterpret(to_type, cast<uint16_t>(select(is_nan, nan16, cast<uint32_t>(number16))));
      }
    }
    (*out_)(x, y, z, w) = cast(attention_gen::stored_type(to, get_target()), value);
    if (get_target().has_gpu_feature()) {
      // Any strides on a GPU (the runtime converts Device::CUDA tensors as the caller laid them
      // out); on a CPU the innermost dimension is contiguous, for vector loads.
      in_->dim(0).set_stride(Expr());
      out_->dim(0).set_stride(Expr());
    }
    in_->set_estimates({{0, 64}, {0, 1024}, {0, 8}, {0, 1}});
    out_->set_estimates({{0, 64}, {0, 1024}, {0, 8}, {0, 1}});
  }

  // Rows of x (the contiguous dim) a vector at a time, blocks of rows across threads. Memory
  // bound: the point is only to use the conversion instructions (F16C, NEON fcvtl/fcvtn) and all
  // cores, and to handle any extents (guarded tails, no minimum size).
  // GPU: a thread per element, blocks of 64 along x and 4 rows.
  void schedule() {
    if (using_autoscheduler()) return;
    Func out = *out_;
    if (get_target().has_gpu_feature()) {
      Var rows("rows"), xo("xo"), xi("xi"), ro("ro"), ri("ri");
      out.fuse(y, z, rows)
          .fuse(rows, w, rows)
          .gpu_tile(x, rows, xo, ro, xi, ri, 64, 4, TailStrategy::GuardWithIf);
      return;
    }
    const int lanes = get_target().natural_vector_size<float>();
    Var rows("rows"), task("task"), row("row");
    out.fuse(y, z, rows)
        .fuse(rows, w, rows)
        .split(rows, task, row, 64, TailStrategy::GuardWithIf)
        .parallel(task)
        .vectorize(x, lanes * 2, TailStrategy::GuardWithIf);
  }

 private:
  Var x{"x"}, y{"y"}, z{"z"}, w{"w"};
  GeneratorInput<Buffer<>>* in_ = nullptr;
  GeneratorOutput<Buffer<>>* out_ = nullptr;
};

}  // namespace

HALIDE_REGISTER_GENERATOR(ConvertGenerator, convert)
