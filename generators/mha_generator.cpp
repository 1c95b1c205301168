// Generator for nn.MultiheadAttention's whole block in one pipeline:
//
//   Q = x_q·W_qᵀ + b_q,  K = x_kv·W_kᵀ + b_k,  V = x_kv·W_vᵀ + b_v       (projections)
//   head h of Q is columns [h·D, (h + 1)·D); K and V have num_kv_heads heads (GQA/MQA)
//   attention per head, with every mask of algorithm/masks.h           (algorithm/sdpa.h)
//   out = concat(heads)·W_oᵀ + b_o
//
// Weights in PyTorch's layout ([N, K] rows), read through any strides: the runtime passes the
// blocks of a packed in_proj_weight as views. Absent biases arrive as zeros.
//
// Fusion boundaries (the schedule's choice): each projection is computed whole, as a
// register-blocked product, before the attention starts, since every query tile reads all of K
// and V and recomputing them per tile would multiply the projection work by the number of tiles.
// The attention stores its output in the concatenated layout (d, h, i, b), which the output
// projection reduces over as a 2-D (d, h) reduction: no division or modulo per element. Each
// stage runs the schedule of its standalone kernel (linear_f32, sdpa_f32_prefill or
// sdpa_f32_masked_prefill).
//
// GeneratorParam masked: true takes every mask; false builds the attention without any masking
// code (about 1.6x faster attention for calls without masks) and ignores the mask arguments, which
// it keeps so both variants share one signature.
#include "Halide.h"
#include "algorithm/linear.h"
#include "algorithm/sdpa.h"
#include "generator_inputs.h"
#include "schedule/linear_cpu.h"
#include "schedule/sdpa_schedule.h"

namespace {

using namespace Halide;
using namespace attention_gen;

class MhaGenerator : public Generator<MhaGenerator> {
 public:
  GeneratorParam<bool> masked{"masked", true};
  // GPU targets: the projections' tiles (schedule/cuda.h, GpuLinearTiling).
  GeneratorParam<int> gpu_proj_tile{"gpu_proj_tile", GpuLinearTiling{}.tile};
  GeneratorParam<int> gpu_proj_k_block{"gpu_proj_k_block", GpuLinearTiling{}.k_block};
  // The attention stage's tiling choices (kernel_contract.h; the prefill tiling's).
  TilingParams tiling;

  Input<Buffer<float, 3>> x_q{"x_q"};    // (e, i, b)
  Input<Buffer<float, 3>> x_kv{"x_kv"};  // (e_kv, j, b)
  Input<Buffer<float, 2>> w_q{"w_q"};    // (e, n): [E, E]
  Input<Buffer<float, 1>> b_q{"b_q"};    // (n)
  Input<Buffer<float, 2>> w_k{"w_k"};    // (e_kv, n): [Hkv·D, Ekv]
  Input<Buffer<float, 1>> b_k{"b_k"};
  Input<Buffer<float, 2>> w_v{"w_v"};  // (e_kv, n): [Hkv·D, Ekv]
  Input<Buffer<float, 1>> b_v{"b_v"};
  Input<Buffer<float, 2>> w_o{"w_o"};  // (e, n): [E, E]
  Input<Buffer<float, 1>> b_o{"b_o"};
  Input<int32_t> num_heads{"num_heads"};        // H, divides E
  Input<int32_t> num_kv_heads{"num_kv_heads"};  // Hkv, divides H
  Input<float> scale{"scale"};
  // configure() adds the mask arguments and key_split (keys per split, as the SDPA kernels').
  Output<Buffer<float, 3>> out{"out"};              // (n, i, b)
  Output<Buffer<float, 3>> logsumexp{"logsumexp"};  // (i, h, b): each head's, as SDPA's

  void configure() {
    mask_args_.add_to(*this);
    key_split_ = add_input<int32_t>("key_split");
  }

  void generate() {
    // Rows and positions start at 0: the clamps and block skipping below count from there.
    for (auto* x : {&x_q, &x_kv}) x->dim(1).set_min(0);
    out.dim(1).set_min(0);
    const Expr E = x_q.dim(0).extent(), Sq = x_q.dim(1).extent(), Sk = x_kv.dim(1).extent();
    const Expr H = num_heads, D = E / H;

    q_proj_ = linear_of_inputs(x_q, w_q, b_q);
    k_proj_ = linear_of_inputs(x_kv, w_k, b_k);
    v_proj_ = linear_of_inputs(x_kv, w_v, b_v);

    // The heads, read in place from the projections. Tiles round queries and keys up: positions
    // are clamped (their results are never stored). Prefill P·V rounds the value features up to
    // whole blocks: zeros there.
    Var c("c"), d("d"), i("i"), j("j"), h("h"), b("b");
    Func q_heads("q_heads"), k_heads("k_heads"), v_heads("v_heads");
    q_heads(d, i, h, b) = q_proj_.y(h * D + d, clamp(i, 0, Sq - 1), b);
    k_heads(d, j, h, b) = k_proj_.y(h * D + d, clamp(j, 0, Sk - 1), b);
    v_heads(c, j, h, b) =
        select(c < D, v_proj_.y(h * D + clamp(c, 0, D - 1), clamp(j, 0, Sk - 1), b), 0.0f);

    SdpaInputs in;
    plan_ = sdpa_plan(get_target(), get_target(), /*wide_queries=*/true, tiling);
    if (masked) {
      mask_ = mask_args_.masks();
      set_mask_blocks(mask_, plan_);
      in.mask = &mask_;
      in.values_finite = mask_args_.values_finite();
    }
    in.q = q_heads;
    in.k = k_heads;
    in.v = v_heads;
    in.scale = scale;
    in.head_dim = D;
    in.value_dim = D;
    in.seq_k = Sk;
    in.heads_per_kv = H / num_kv_heads;
    in.key_split = *key_split_;
    if (plan_.gpu) {
      // The register tiles hold split_keys keys: a larger split would drop keys.
      add_requirement(*key_split_ >= 1 && *key_split_ <= plan_.gpu_tiling.split_keys,
                      "key_split must be in [1, ", plan_.gpu_tiling.split_keys, "], got ",
                      *key_split_);
    }
    set_feature_blocks(in, plan_);
    in.stats_in_out = !plan_.gpu;
    attention_ = scaled_dot_product(in);
    // CPU: the attention's out carries each row's logsumexp (SdpaInputs::stats_in_out), which the
    // logsumexp output copies out after it (a row per head, beside Sq·H·D features).
    Func attended = attention_.out, lse_of_rows = attention_.logsumexp;
    if (in.stats_in_out) {
      attended = Func("attended");
      attended(d, i, h, b) = attention_.out(d, i, h, b)[0];
      lse_of_rows = Func("lse_of_rows");
      lse_of_rows(i, h, b) = attention_.out(0, i, h, b)[1];
    }

    // The output projection reduces over (d, h): the concatenation's column h·D + d.
    Func concat("concat"), w_o_heads("w_o_heads");
    concat(d, h, i, b) = attended(d, clamp(i, 0, Sq - 1), h, b);
    Func w_o_padded = columns_zero_padded(w_o);
    Var n("n");
    w_o_heads(d, h, n, b) = w_o_padded(h * D + d, n);
    w_o.dim(0).set_stride(Expr());
    out_proj_ = linear_product(concat, w_o_heads, columns_zero_padded(b_o), {D, H});
    out = out_proj_.y;
    logsumexp = lse_of_rows;
    // logsumexp covers exactly the attention's rows.
    logsumexp.dim(0).set_bounds(0, Sq);
    logsumexp.dim(1).set_bounds(0, H);
    logsumexp.dim(2).set_bounds(out.dim(2).min(), out.dim(2).extent());
    set_estimates();
  }

  void schedule() {
    if (using_autoscheduler()) return;
    const Target target = get_target();
    const AttentionVars& x = attention_.vars;
    if (plan_.gpu) {
      // GPU: each projection and the attention a kernel of their own (schedule/cuda.h).
      const GpuLinearTiling proj{gpu_proj_tile, gpu_proj_k_block};
      const std::string error = gpu_linear_tiling_error(proj);
      _halide_user_assert(error.empty()) << error << "\n";
      // Whole tiles from 0 (the attention's clamped reads would start v's rows anywhere), so each
      // thread's 4 rows and columns are aligned 4-wide loads of the staged blocks.
      for (LinearFuncs* f : {&q_proj_, &k_proj_, &v_proj_}) {
        f->y.compute_root().align_bounds(f->n, proj.tile).align_bounds(f->m, proj.tile);
        schedule_linear_gpu(*f, proj);
      }
      attention_.out.compute_root().reorder_storage(x.c, x.h, x.i, x.b);
      schedule_sdpa(attention_, plan_);
      schedule_linear_gpu(out_proj_, proj);
      return;
    }
    const std::pair<LinearFuncs*, const Input<Buffer<float, 2>>*> projections[] = {
        {&q_proj_, &w_q}, {&k_proj_, &w_k}, {&v_proj_, &w_v}};
    for (const auto& [proj, weight] : projections) {
      proj->y.compute_root();
      schedule_linear_cpu(*proj, target, (*weight).dim(1).stride() == 1);
    }
    attention_.out.compute_root().reorder_storage(x.c, x.h, x.i, x.b);
    schedule_sdpa(attention_, plan_);
    schedule_linear_cpu(out_proj_, target, w_o.dim(1).stride() == 1);
  }

 private:
  MaskArguments mask_args_;
  MaskInputs mask_;
  GeneratorInput<int32_t>* key_split_ = nullptr;
  LinearFuncs q_proj_, k_proj_, v_proj_, out_proj_;
  SdpaFuncs attention_;
  SdpaPlan plan_;

  void set_estimates() {
    const int e = 512, s = 512, heads = 8;
    for (auto* x : {&x_q, &x_kv}) x->set_estimates({{0, e}, {0, s}, {0, 1}});
    for (auto* w : {&w_q, &w_k, &w_v, &w_o}) w->set_estimates({{0, e}, {0, e}});
    for (auto* bias : {&b_q, &b_k, &b_v, &b_o}) bias->set_estimates({{0, e}});
    num_heads.set_estimate(heads);
    num_kv_heads.set_estimate(heads);
    scale.set_estimate(0.125f);
    key_split_->set_estimate(s);
    out.set_estimates({{0, e}, {0, s}, {0, 1}});
    logsumexp.set_estimates({{0, s}, {0, heads}, {0, 1}});
  }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(MhaGenerator, mha)
