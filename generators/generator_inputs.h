// Generator inputs as the algorithm's Funcs, shared by the generators: the boundary conditions of
// the linear products, and the masked kernels' mask arguments.
#pragma once

#include "Halide.h"
#include "algorithm/linear.h"
#include "algorithm/masks.h"

namespace attention_gen {

template <typename T, int Dims>
using BufferInput = Halide::GeneratorInput<Halide::Buffer<T, Dims>>;

// x (k, m, b) with its last row repeated: register blocks round rows up past the end.
inline Halide::Func rows_clamped(const BufferInput<float, 3>& x) {
  Halide::Region rows(3);
  rows[1] = Halide::Range(x.dim(1).min(), x.dim(1).extent());
  return Halide::BoundaryConditions::repeat_edge(x, rows);
}

// A weight (k, n) or bias (n) extended with zero columns (dim Dims - 1): the products of the
// columns blocks round up to land in columns y never stores.
template <int Dims>
Halide::Func columns_zero_padded(const BufferInput<float, Dims>& w) {
  Halide::Region columns(Dims);
  columns[Dims - 1] = Halide::Range(w.dim(Dims - 1).min(), w.dim(Dims - 1).extent());
  return Halide::BoundaryConditions::constant_exterior(w, 0.0f, columns);
}

// y (n, m, b) = x (k, m, b) · weightᵀ + bias for a weight (k, n) at any strides (so W [K, N]
// passes as its transpose, without a copy) and a bias (n).
inline LinearFuncs linear_of_inputs(BufferInput<float, 3>& x, BufferInput<float, 2>& weight,
                                    const BufferInput<float, 1>& bias) {
  weight.dim(0).set_stride(Halide::Expr());
  Halide::Func weight_padded = columns_zero_padded(weight);
  Halide::Var k, n, b;
  Halide::Func weight_of_batch("weight_of_batch");
  weight_of_batch(k, n, b) = weight_padded(k, n);
  return linear_product(rows_clamped(x), weight_of_batch, columns_zero_padded(bias),
                        {x.dim(0).extent()});
}

// The arguments of every masked kernel, in the order runtime/src/call/mask_args.h passes them. A
// generator adds them in configure() (so they follow its own inputs) and reads them in generate().
class MaskArguments {
 public:
  template <typename Generator>
  void add_to(Generator& g) {
    key_lengths_ = g.template add_input<Halide::Buffer<int32_t, 1>>("key_lengths");  // (b)
    query_lengths_ = g.template add_input<Halide::Buffer<int32_t, 1>>("query_lengths");
    diag_offset_ = g.template add_input<int32_t>("diag_offset");
    band_back_ = g.template add_input<int32_t>("band_back");
    band_forward_ = g.template add_input<int32_t>("band_forward");
    has_bias_ = g.template add_input<bool>("has_bias");
    // (j, i, h, b); broadcast dims arrive with stride 0, so no dimension needs stride 1.
    bool_mask_ = g.template add_input<Halide::Buffer<uint8_t, 4>>("bool_mask");
    additive_mask_ = g.template add_input<Halide::Buffer<float, 4>>("additive_mask");
    alibi_slopes_ = g.template add_input<Halide::Buffer<float, 1>>("alibi_slopes");  // (h)
    softcap_ = g.template add_input<float>("softcap");
    values_finite_ = g.template add_input<bool>("values_finite");
  }

  // The masks on these arguments (the caller sets the tiling fields, query_group and key_block).
  MaskInputs masks() {
    bool_mask_->dim(0).set_stride(Halide::Expr());
    additive_mask_->dim(0).set_stride(Halide::Expr());
    MaskInputs m;
    m.diag_offset = *diag_offset_;
    m.band_back = *band_back_;
    m.band_forward = *band_forward_;
    m.key_length = *key_lengths_;
    m.query_length = *query_lengths_;
    m.has_bias = *has_bias_;
    // Tiles round rows and keys up past the ends: clamp those reads (the logits there are hidden
    // by the length masks anyway).
    m.allowed = rows_and_keys_clamped(*bool_mask_);
    m.additive = rows_and_keys_clamped(*additive_mask_);
    m.alibi_slope = *alibi_slopes_;
    m.softcap = *softcap_;
    return m;
  }

  // False when v may hold NaN/Inf (SdpaInputs::values_finite).
  Halide::Expr values_finite() const { return *values_finite_; }

 private:
  BufferInput<int32_t, 1>*key_lengths_ = nullptr, *query_lengths_ = nullptr;
  Halide::GeneratorInput<int32_t>*diag_offset_ = nullptr, *band_back_ = nullptr,
  *band_forward_ = nullptr;
  Halide::GeneratorInput<bool>*has_bias_ = nullptr, *values_finite_ = nullptr;
  BufferInput<uint8_t, 4>* bool_mask_ = nullptr;
  BufferInput<float, 4>* additive_mask_ = nullptr;
  BufferInput<float, 1>* alibi_slopes_ = nullptr;
  Halide::GeneratorInput<float>* softcap_ = nullptr;

  template <typename T>
  static Halide::Func rows_and_keys_clamped(const BufferInput<T, 4>& in) {
    Halide::Region bounds(4);
    bounds[0] = Halide::Range(in.dim(0).min(), in.dim(0).extent());
    bounds[1] = Halide::Range(in.dim(1).min(), in.dim(1).extent());
    return Halide::BoundaryConditions::repeat_edge(in, bounds);
  }
};

}  // namespace attention_gen
