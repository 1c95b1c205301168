// Generator for scaled dot-product attention: out [B,H,Sq,Dv] and logsumexp [B,H,Sq], fp32 math
// over fp32 q and fp32 or half-precision k and v (GeneratorParam kv_type).
//
// GeneratorParam query_tiling picks the CPU schedule: "prefill" (48-query tiles, register blocks
// across queries) or "decode" (stages along keys and features, for one or two queries). The runtime
// dispatches between the two by Sq.
#include "Halide.h"
#include "algorithm/sdpa.h"
#include "attention/generator/mod.h"
#include "generator_inputs.h"
#include "schedule/sdpa_schedule.h"

namespace {

using namespace Halide;
using namespace attention_gen;

enum class QueryTiling { Prefill, Decode };

// Repeats the first/last position (dim 1) so register blocks that round a tile up may read past the
// end of a sequence without leaving the buffer. Feature dims are never clamped: a per-lane clamp
// turns vector loads into gathers, so the schedule keeps those blocks in bounds instead.
template <typename Input>
Func clamp_positions(const Input& in) {
  Region bounds(4);
  bounds[1] = Range(in.dim(1).min(), in.dim(1).extent());
  return BoundaryConditions::repeat_edge(in, bounds);
}

// v extended with zeros past its last feature (dim 0), so blocks may round Dv up.
Func zero_pad_features(const GeneratorInput<Buffer<>>& in) {
  Region bounds(4);
  bounds[0] = Range(in.dim(0).min(), in.dim(0).extent());
  return BoundaryConditions::constant_exterior(in, cast(in.type(), 0), bounds);
}

// A value of an input of element type `type` (stored as stored_type(type)) as float32.
Expr to_float(const Expr& value, const Type& type) {
  if (value.type() == Float(32)) return value;
  return value.type() == UInt(16) ? half_bits_to_float(value, type) : cast<float>(value);
}

// `f`, an input of element type `type`, read as float32: a half-precision operand is widened where
// it is loaded (F16C / NEON conversions, a shift for bfloat16; integer operations on a GPU's raw
// bits), so every product and sum stays fp32. A float32 `f` is returned as it is, which keeps the
// fp32 kernels' code unchanged.
Func widened(const Func& f, const Type& type, const std::string& name) {
  if (f.type() == Float(32)) return f;
  Func wide(name);
  wide(_) = to_float(f(_), type);
  return wide;
}

// The parts every SDPA generator shares: the tiling parameters, q/k/v/scale in, out/logsumexp out.
// Derived generators add their own inputs in configure(), after add_operands() (so they follow
// q, k, v, scale in the generated function's arguments) and before add_key_split(), and call
// build().
template <typename Self>
class SdpaGeneratorBase : public Generator<Self> {
 public:
  GeneratorParam<QueryTiling> query_tiling{
      "query_tiling",
      QueryTiling::Prefill,
      {{"prefill", QueryTiling::Prefill}, {"decode", QueryTiling::Decode}}};

  // Tests only: derive the tiling from this target (e.g. x86-64-linux-avx512_skylake) instead of
  // the compile target, so a machine without AVX-512 can still execute and check the AVX-512 tile
  // logic.
  GeneratorParam<std::string> tiling_as{"tiling_as", ""};

  // score_queries, score_keys, pv_rows, ... (kernel_contract.h): the schedule's tiling choices.
  TilingParams tiling;

  // Element type of k and v: float32, or float16 / bfloat16 for a half-precision KV cache read
  // as it is stored (decode reads nothing else, so half storage halves its time). q, out,
  // logsumexp and all arithmetic stay fp32. GPU kernels take half k and v as raw UInt(16) bits
  // (stored_type, algorithm/bfloat16.h).
  GeneratorParam<Type> kv_type{"kv_type", Float(32)};

  // Element type of q: float32, or bfloat16 with kv_type bfloat16 for the native bf16 prefill
  // (SdpaInputs::bf16_pairs; x86 targets with avx512_zen4 or avx512_sapphirerapids, whose
  // vdpbf16ps multiplies pairs of bfloat16 at twice an FMA's rate).
  GeneratorParam<Type> q_type{"q_type", Float(32)};

  void configure() {
    add_operands();
    add_key_split();
    add_attention_outputs();
  }

 protected:
  // Inputs q (d, i, h, b), k (d, j, kv_head, b), v (c, j, kv_head, b) and scale, first in every
  // kernel's arguments. Added in configure() because k and v take their type from kv_type.
  void add_operands() {
    q_ = this->template add_input<Buffer<>>("q", q_type, 4);
    const Type kv = stored_type(kv_type, this->get_target());  // GPU: half as raw bits
    k_ = this->template add_input<Buffer<>>("k", kv, 4);
    v_ = this->template add_input<Buffer<>>("v", kv, 4);
    scale_ = this->template add_input<float>("scale");
  }

  // key_split (int32, after every other input): keys per split, in which the kernel walks the
  // keys (see algorithm/sdpa.h); the runtime picks it from the shape. Decode: each split is a
  // parallel work item (a multiple of 64). Prefill: a query tile's splits run one after another,
  // so its score buffers stay in cache.
  void add_key_split() { key_split_ = this->template add_input<int32_t>("key_split"); }

  GeneratorInput<Buffer<>>*q_ = nullptr, *k_ = nullptr, *v_ = nullptr;
  GeneratorInput<float>* scale_ = nullptr;
  GeneratorInput<int32_t>* key_split_ = nullptr;
  SdpaFuncs funcs_;
  SdpaPlan plan_;

  bool prefill() const { return query_tiling == QueryTiling::Prefill; }

  // q, k and v in bfloat16, multiplied natively (see q_type).
  bool bf16_pairs() const {
    const Type q = q_type;
    if (q == Float(32)) return false;
    const Target t = this->get_target();
    const bool bf16_dot = t.arch == Target::X86 && (t.has_feature(Target::AVX512_Zen4) ||
                                                    t.has_feature(Target::AVX512_SapphireRapids));
    _halide_user_assert(q == BFloat(16) && Type(kv_type) == BFloat(16) && prefill() && bf16_dot)
        << "q_type=" << q << ": only bfloat16, with kv_type=bfloat16, query_tiling=prefill and an "
        << "x86 target with avx512_zen4 or avx512_sapphirerapids (got kv_type=" << Type(kv_type)
        << ", target " << t.to_string() << ")\n";
    return true;
  }

  Target tiling_target() const {
    const std::string as = tiling_as;
    return as.empty() ? this->get_target() : Target(as);
  }

  // Defines the pipeline into `out` and `lse`; `mask` (may be null) must outlive the call.
  // `customize` may change the inputs (the score form) before the algorithm runs. The outputs are
  // add_attention_outputs()'s.
  void build(MaskInputs* mask, Expr values_finite = Expr(),
             const std::function<void(SdpaInputs&)>& customize = {}) {
    define(mask, values_finite, customize);
    if (plan_.gpu) {
      // The register tiles hold split_keys keys: a larger split would drop keys.
      this->add_requirement(*key_split_ >= 1 && *key_split_ <= plan_.gpu_tiling.split_keys,
                            "key_split must be in [1, ", plan_.gpu_tiling.split_keys, "], got ",
                            *key_split_);
    }
    if (out_and_lse_ != nullptr) {
      *out_and_lse_ = funcs_.out;
      std::vector<OutputImageParam> buffers = Func(*out_and_lse_).output_buffers();
      // Block skipping needs query positions that start at 0, so a tile's rows are its group's
      // rows. The logsumexp buffer's feature dimension repeats each row (stride 0); Halide keeps
      // both buffers' extents equal.
      buffers[0].dim(1).set_min(0);
      buffers[1].dim(0).set_stride(0);
    } else {
      GeneratorOutput<Buffer<float, 4>>& out = *out_;
      GeneratorOutput<Buffer<float, 3>>& lse = *logsumexp_;
      out = funcs_.out;
      lse = funcs_.logsumexp;
      out.dim(1).set_min(0);
      // logsumexp covers exactly out's rows.
      for (int dim = 0; dim < 3; ++dim) {
        lse.dim(dim).set_bounds(out.dim(dim + 1).min(), out.dim(dim + 1).extent());
      }
    }
    set_estimates();
  }

  // The outputs, after every input: on a CPU one Tuple-valued output "out" whose two buffers are
  // out (c, i, h, b) and logsumexp (c, i, h, b) with a stride-0 c (SdpaInputs::stats_in_out); on
  // a GPU out (c, i, h, b) and logsumexp (i, h, b).
  void add_attention_outputs() {
    if (gpu()) {
      out_ = this->template add_output<Buffer<float, 4>>("out");
      logsumexp_ = this->template add_output<Buffer<float, 3>>("logsumexp");
    } else {
      out_and_lse_ =
          this->template add_output<Func>("out", std::vector<Type>{Float(32), Float(32)}, 4);
    }
  }

  // The algorithm's Funcs (funcs_) without binding any output.
  void define(MaskInputs* mask, Expr values_finite,
              const std::function<void(SdpaInputs&)>& customize) {
    const GeneratorInput<Buffer<>>&q = *q_, &k = *k_, &v = *v_;
    SdpaInputs in;
    in.bf16_pairs = bf16_pairs();
    in.whole_key_stats = !prefill() && !gpu();
    in.q = clamp_positions(q);
    in.k = in.bf16_pairs ? clamp_positions(k) : widened(clamp_positions(k), kv_type, "k_f32");
    // Prefill stages v per head, padded with zero features so P·V blocks never need a tail (GPU:
    // blocks of whole thread tiles); CPU decode reads v once and in place. Bounds inference ignores
    // the predicates that keep reductions inside [0, Sk) (the last split, masked key ranges), so
    // positions are clamped.
    if (in.bf16_pairs) {
      // Zeros past Sk as well as past Dv (SdpaInputs::bf16_pairs), as stored.
      Region bounds(4);
      bounds[0] = Range(v.dim(0).min(), v.dim(0).extent());
      bounds[1] = Range(v.dim(1).min(), v.dim(1).extent());
      in.v = BoundaryConditions::constant_exterior(v, cast(BFloat(16), 0), bounds);
    } else if (prefill() || gpu()) {
      Func padded = zero_pad_features(v);
      Var c, j, h, b;
      in.v = Func("v_padded_clamped");
      in.v(c, j, h, b) =
          to_float(padded(c, clamp(j, v.dim(1).min(), v.dim(1).max()), h, b), kv_type);
    } else {
      in.v = widened(clamp_positions(v), kv_type, "v_f32");
    }
    in.key_split = *key_split_;
    in.scale = *scale_;
    in.head_dim = q.dim(0).extent();
    in.query_rows = q.dim(1).extent();
    in.value_dim = v.dim(0).extent();
    in.seq_k = k.dim(1).extent();
    in.heads_per_kv = q.dim(2).extent() / k.dim(2).extent();
    in.mask = mask;
    in.values_finite = values_finite;
    in.stats_in_out = !gpu();
    plan_ = sdpa_plan(this->get_target(), tiling_target(), prefill(), tiling, in.bf16_pairs);
    if (mask) set_mask_blocks(*mask, plan_);
    if (customize) customize(in);
    set_feature_blocks(in, plan_);
    funcs_ = scaled_dot_product(in);
  }

  // CUDA or OpenCL: the GPU schedule (schedule/cuda.h) and its v layout; otherwise the CPU one.
  bool gpu() const { return this->get_target().has_gpu_feature(); }

  // The schedule of out and logsumexp: the autoscheduler's, or the plan's CPU or GPU schedule.
  void schedule_attention() {
    if (!this->using_autoscheduler()) schedule_sdpa(funcs_, plan_);
  }

 private:
  // The inputs' and the bound outputs' estimates (the autoschedulers' shape).
  void set_estimates() {
    const int sq = prefill() ? 1024 : 1;
    const int sk = 1024, d = 64, heads = 8, batch = 1;
    GeneratorInput<Buffer<>>&q = *q_, &k = *k_, &v = *v_;
    q.set_estimates({{0, d}, {0, sq}, {0, heads}, {0, batch}});
    k.set_estimates({{0, d}, {0, sk}, {0, heads}, {0, batch}});
    v.set_estimates({{0, d}, {0, sk}, {0, heads}, {0, batch}});
    scale_->set_estimate(0.125f);
    key_split_->set_estimate(512);
    const Region out = {{0, d}, {0, sq}, {0, heads}, {0, batch}};
    if (out_and_lse_ != nullptr) {
      for (OutputImageParam& buffer : Func(*out_and_lse_).output_buffers()) {
        buffer.set_estimates(out);  // logsumexp's over out's shape too
      }
    } else {
      out_->set_estimates(out);
      logsumexp_->set_estimates({{0, sq}, {0, heads}, {0, batch}});
    }
  }

  GeneratorOutput<Func>* out_and_lse_ = nullptr;
  GeneratorOutput<Buffer<float, 4>>* out_ = nullptr;
  GeneratorOutput<Buffer<float, 3>>* logsumexp_ = nullptr;
};

// Plain SDPA: no masking code at all.
class SdpaGenerator : public SdpaGeneratorBase<SdpaGenerator> {
 public:
  void generate() { build(nullptr); }
  void schedule() { schedule_attention(); }
};

enum class ScoreForm { Dot, Additive };

// SDPA with every mask of algorithm/masks.h. The runtime passes neutral values for unused pieces.
//
// score=additive: Bahdanau's score scale · Σ_a w_a · tanh(q_a + k_a) instead of scale · q·k, with
// the extra input score_weights (a) = w_a. q and k are the projections W_q·q (+ bias) and W_k·k
// over the attention dimension A (computed once by the runtime, not per pair).
//
// output=weights: the attention weights instead (the alignment matrix, for inspection):
// weights (j, i, h, b) = exp(logit - logsumexp(i, h, b)) given the attention call's logsumexp
// (input row_logsumexp), 0 at hidden keys. A second pass over the scores, scheduled simply.
class MaskedSdpaGenerator : public SdpaGeneratorBase<MaskedSdpaGenerator> {
 public:
  enum class Produces { Attention, Weights };
  GeneratorParam<ScoreForm> score{
      "score", ScoreForm::Dot, {{"dot", ScoreForm::Dot}, {"additive", ScoreForm::Additive}}};
  GeneratorParam<Produces> output{
      "output",
      Produces::Attention,
      {{"attention", Produces::Attention}, {"weights", Produces::Weights}}};

  // Rotary embeddings fused in (prefill, dot-product attention on fp32 CPU targets): q and k are
  // rotated as they are read, key j of batch b at position rope_positions(b) + j and query row i
  // at rope_positions(b) + Sk - Sq + i (the queries are the last Sq positions). Inputs after the
  // mask arguments: rope_positions (b) Int32, rope_inv_freq (pair) θ_i, rope_dim R, and
  // rope_interleaved (GPT-J pairs, else half-split), as the rope generator takes them.
  GeneratorParam<bool> rope{"rope", false};

  // The mask arguments, outputs (and the weights' row_logsumexp input) are added by configure().

  void generate() {
    mask_ = mask_args_.masks();
    auto score_form = [this](SdpaInputs& in) {
      if (rope) rotate_inputs(in);
      if (score != ScoreForm::Additive) return;
      score_weights_->set_estimates({{0, 64}});
      Func w = *score_weights_;
      Expr temperature = in.scale;
      in.scale = 1.0f;
      in.score_term = [w](const Expr& q_a, const Expr& k_a, const Expr& a) {
        return w(a) * tanh_vectorizable(q_a + k_a);
      };
      in.logit_of_score = [temperature](const Expr& s) { return temperature * s; };
    };
    if (output == Produces::Weights) {
      define(&mask_, Expr(false), score_form);
      const AttentionVars& x = funcs_.vars;
      Expr logit = funcs_.logits(x.j, x.i, x.h, x.b);
      Expr lse = (*row_logsumexp_)(x.i, x.h, x.b);
      (*weights_)(x.j, x.i, x.h, x.b) = select(is_minus_infinity(logit), 0.0f, exp(logit - lse));
      return;
    }
    // Decode's P·V already runs at memory speed: always take the NaN-safe form there.
    build(&mask_, prefill() ? mask_args_.values_finite() : Expr(false), score_form);
  }

  void schedule() {
    if (output == Produces::Weights) {
      if (!using_autoscheduler()) schedule_attention_weights_cpu(funcs_, *weights_, get_target());
      return;
    }
    schedule_attention();
  }

  // Inputs in order: q, k, v, scale, the mask arguments, rope's, the additive form's w_a, the
  // weights' row_logsumexp, then key_split; then the outputs.
  void configure() {
    add_operands();
    mask_args_.add_to(*this);
    if (rope) {
      _halide_user_assert(prefill() && !gpu() && score == ScoreForm::Dot &&
                          output == Produces::Attention && Type(kv_type) == Float(32))
          << "rope=true: only query_tiling=prefill, score=dot, output=attention, kv_type=float32 "
          << "on a CPU target\n";
      rope_positions_ = add_input<Buffer<int32_t, 1>>("rope_positions");  // (b)
      rope_inv_freq_ = add_input<Buffer<float, 1>>("rope_inv_freq");      // (pair)
      rope_dim_ = add_input<int32_t>("rope_dim");
      rope_interleaved_ = add_input<bool>("rope_interleaved");
    }
    if (score == ScoreForm::Additive) {
      score_weights_ = add_input<Buffer<float, 1>>("score_weights");
    }
    if (output == Produces::Weights) {
      row_logsumexp_ = add_input<Buffer<float, 3>>("row_logsumexp");  // (i, h, b)
    }
    add_key_split();
    if (output == Produces::Weights) {
      weights_ = add_output<Buffer<float, 4>>("weights");  // (j, i, h, b)
    } else {
      add_attention_outputs();
    }
  }

 private:
  // in.q and in.k rotated (GeneratorParam rope): one cos/sin table over the key positions, which
  // the queries read at their own positions.
  void rotate_inputs(SdpaInputs& in) {
    Var pair("pair"), position("position"), b("b"), i("i");
    const Expr half = *rope_dim_ / 2;
    const Expr angle =
        cast<float>((*rope_positions_)(b) + position) * (*rope_inv_freq_)(clamp(pair, 0, half - 1));
    const auto [c, sn] = cos_sin(angle);
    in.rope_table = Func("rope_table");
    in.rope_table(pair, position, b) = {c, sn};
    const Expr query_shift = k_->dim(1).extent() - q_->dim(1).extent();
    Func query_angles("rope_query_angles");
    query_angles(pair, i, b) = {in.rope_table(pair, i + query_shift, b)[0],
                                in.rope_table(pair, i + query_shift, b)[1]};
    in.rotated_q = rotate_rows(in.q, query_angles, *rope_dim_, *rope_interleaved_, "q_rotated");
    in.rotated_k = rotate_rows(in.k, in.rope_table, *rope_dim_, *rope_interleaved_, "k_rotated");
    in.q = in.rotated_q.out;
    in.k = in.rotated_k.out;
    rope_positions_->set_estimates({{0, 1}});
    rope_inv_freq_->set_estimates({{0, 32}});
    rope_dim_->set_estimate(64);
    rope_interleaved_->set_estimate(false);
  }

  MaskArguments mask_args_;
  MaskInputs mask_;
  GeneratorInput<Buffer<int32_t, 1>>* rope_positions_ = nullptr;
  GeneratorInput<Buffer<float, 1>>* rope_inv_freq_ = nullptr;
  GeneratorInput<int32_t>* rope_dim_ = nullptr;
  GeneratorInput<bool>* rope_interleaved_ = nullptr;
  GeneratorInput<Buffer<float, 1>>* score_weights_ = nullptr;
  GeneratorInput<Buffer<float, 3>>* row_logsumexp_ = nullptr;
  GeneratorOutput<Buffer<float, 4>>* weights_ = nullptr;
};

// SDPA with a user mod (attention/generator/mod.h) linked into this generator executable, named by
// GeneratorParam mod: score_mod and mask_mod spliced into the masked algorithm, whose masks are
// otherwise neutral (a mod says everything it masks). CPU targets, and GPU targets for prefill and
// key_ranges (schedule/cuda.h). Inputs: q, k, v, scale, the mod's tensors (declaration order), its
// scalars, [key_ranges,] values_finite, key_split.
//
// Block skipping (a mod with a mask_mod): output=key_ranges makes the kernel that scans mask_mod
// over every (query, key) pair once per call, writing key_ranges (e, g, h, b): the first (e = 0)
// and last (e = 1) key that a row of query group g (the prefill tile) sees. The prefill attention
// kernel takes it as an input and computes only the key splits inside each tile's range: a value
// read from an input, unlike one computed in the same pipeline, can bound the loop over splits.
// The decode kernel (one query group) scans in place and skips the splits outside the range in
// its combine.
class ModSdpaGenerator : public SdpaGeneratorBase<ModSdpaGenerator> {
 public:
  enum class Produces { Attention, KeyRanges };
  GeneratorParam<std::string> mod{"mod", ""};
  GeneratorParam<Produces> output{
      "output",
      Produces::Attention,
      {{"attention", Produces::Attention}, {"key_ranges", Produces::KeyRanges}}};

  void configure() {
    add_operands();
    add_mod_inputs();
    const bool ranges = output == Produces::KeyRanges;
    _halide_user_assert(!ranges || (prefill() && mod_->mask_mod))
        << "mod=" << mod_->name << " output=key_ranges: query_tiling=prefill, mods with a "
        << "mask_mod only\n";
    if (!ranges && prefill() && mod_->mask_mod) {
      key_ranges_in_ = add_input<Buffer<int32_t, 4>>("key_ranges");  // (e, g, h, b)
    }
    values_finite_ = add_input<bool>("values_finite");
    add_key_split();
    if (ranges) {
      key_ranges_out_ = add_output<Buffer<int32_t, 4>>("key_ranges");
    } else {
      add_attention_outputs();
    }
  }

  void generate() {
    mask_ = neutral_masks();
    apply_mod();
    if (key_ranges_out_ != nullptr) {
      // The prefill tiling's query groups (the attention kernel's tiles).
      plan_ = sdpa_plan(get_target(), tiling_target(), true, tiling);
      set_mask_blocks(mask_, plan_);
      mod_key_scan(mask_, funcs_, k_->dim(1).extent());
      const AttentionVars& x = funcs_.vars;
      Var e("e");
      (*key_ranges_out_)(e, x.g, x.h, x.b) =
          select(e == 0, mask_.mod_keys(x.g, x.h, x.b)[0], mask_.mod_keys(x.g, x.h, x.b)[1]);
      key_ranges_out_->dim(0).set_bounds(0, 2);
      return;
    }
    if (key_ranges_in_ != nullptr) {
      const AttentionVars& x = funcs_.vars;
      const Func ranges = *key_ranges_in_;
      // The group clamped into the input: the rows' predicate reads it at i / query_group, which
      // bounds inference bounds loosely (up to twice the groups) through the row tiles' loops.
      const Expr g = clamp(x.g, key_ranges_in_->dim(1).min(), key_ranges_in_->dim(1).max());
      mask_.mod_keys = Func("mod_keys");
      mask_.mod_keys(x.g, x.h, x.b) = Tuple(ranges(0, g, x.h, x.b), ranges(1, g, x.h, x.b));
      key_ranges_in_->dim(0).set_bounds(0, 2);
    }
    // Decode's rows (Sq <= 2) are one query group: mask_mod's range is then one value per head
    // and batch (MaskInputs::single_group).
    mask_.single_group = !prefill();
    mask_.gather_mod_splits = !gpu();
    // Decode's P·V already runs at memory speed: always take the NaN-safe form there.
    build(&mask_, prefill() ? Expr(*values_finite_) : Expr(false));
    if (!prefill()) {
      add_requirement(q_->dim(1).extent() <= mask_.query_group, "mod_sdpa decode: at most",
                      mask_.query_group, "queries, got", q_->dim(1).extent());
    }
  }

  void schedule() {
    if (key_ranges_out_ == nullptr) return schedule_attention();
    if (gpu()) return schedule_mod_key_scan_gpu(funcs_, *key_ranges_out_);
    const AttentionVars& x = funcs_.vars;
    key_ranges_out_->compute_root().parallel(x.b);
    schedule_mod_key_scan(funcs_, plan_.cpu);
  }

 private:
  // Masks that hide nothing: every key in [0, Sk) of every row in [0, Sq).
  MaskInputs neutral_masks() {
    const Expr seq_q = q_->dim(1).extent(), seq_k = k_->dim(1).extent();
    Var b;
    MaskInputs m;
    m.diag_offset = 0;
    m.band_back = seq_q;
    m.band_forward = seq_k;
    m.key_length(b) = seq_k;
    m.query_length(b) = seq_q;
    m.has_bias = Internal::const_false();
    Var j, i, h;
    m.allowed(j, i, h, b) = cast<uint8_t>(1);
    m.additive(j, i, h, b) = 0.0f;
    m.alibi_slope(h) = 0.0f;
    m.softcap = 0.0f;
    return m;
  }

  // The mod's tensors (in declaration order, each with its row-major shape checked against the
  // call's at entry) and scalars.
  void add_mod_inputs() {
    const std::string name = mod;
    mod_ = attention::mod::find_mod(name);
    std::string known;
    for (const attention::mod::ModDefinition& m : attention::mod::registered_mods()) {
      known += (known.empty() ? "" : ", ") + m.name;
    }
    _halide_user_assert(mod_ != nullptr)
        << "mod=" << (name.empty() ? "(empty)" : name) << ": no such mod in this generator ("
        << (known.empty() ? "none" : known) << ")\n";
    _halide_user_assert(!gpu() || prefill())
        << "mod=" << name << ": a GPU target builds query_tiling=prefill kernels only (their "
        << "prefill kernel serves decode calls too)\n";
    for (const attention::mod::TensorSpec& t : mod_->tensors) {
      mod_tensors_.push_back(add_input<Buffer<>>(t.name, t.type, static_cast<int>(t.dims.size())));
    }
    for (const attention::mod::ScalarSpec& t : mod_->scalars) {
      mod_scalars_.push_back(add_input<Expr>(t.name, t.type));
    }
  }

  // The mod's functions as mask pieces over its inputs (reads clamped into each tensor).
  void apply_mod() {
    using attention::mod::Extent;
    const Expr batch = q_->dim(3).extent(), heads = q_->dim(2).extent();
    const Expr seq_q = q_->dim(1).extent(), seq_k = k_->dim(1).extent();
    attention::mod::ModInputs inputs;
    inputs.set_lengths(seq_q, seq_k);
    for (size_t t = 0; t < mod_tensors_.size(); ++t) {
      const attention::mod::TensorSpec& spec = mod_->tensors[t];
      GeneratorInput<Buffer<>>& input = *mod_tensors_[t];
      const int rank = static_cast<int>(spec.dims.size());
      std::string shape;
      for (int d = 0; d < rank; ++d) {
        const Extent e = spec.dims[d];
        shape += std::string(d ? ", " : "") + (e == Extent::Batch     ? "B"
                                               : e == Extent::Heads   ? "H"
                                               : e == Extent::Queries ? "Sq"
                                               : e == Extent::Keys    ? "Sk"
                                                                      : "any");
      }
      for (int d = 0; d < rank; ++d) {
        // Row-major dim d is Halide dim rank - 1 - d.
        const Expr extent = input.dim(rank - 1 - d).extent();
        const Extent e = spec.dims[d];
        const Expr expected = e == Extent::Batch     ? batch
                              : e == Extent::Heads   ? heads
                              : e == Extent::Queries ? seq_q
                              : e == Extent::Keys    ? seq_k
                                                     : Expr();
        // Halide prints the message's parts with spaces between them.
        const std::string what =
            spec.name + ": expected shape [" + shape + "], dim " + std::to_string(d) + " is";
        if (expected.defined()) {
          add_requirement(extent == expected, what, extent, "instead of", expected);
        } else {
          add_requirement(extent >= 1, what, "empty");
        }
      }
      inputs.add_tensor(spec.name, attention::mod::ModInputs::Tensor(
                                       BoundaryConditions::repeat_edge(input), rank));
    }
    for (size_t t = 0; t < mod_scalars_.size(); ++t) {
      inputs.add_scalar(mod_->scalars[t].name, *mod_scalars_[t]);
    }
    if (mod_->score_mod) {
      mask_.score_mod = [f = mod_->score_mod, inputs](const Expr& score, const Expr& i,
                                                      const Expr& j, const Expr& h, const Expr& b) {
        return cast<float>(f(score, b, h, i, j, inputs));
      };
    }
    if (mod_->mask_mod) {
      mask_.mask_mod = [f = mod_->mask_mod, inputs](const Expr& i, const Expr& j, const Expr& h,
                                                    const Expr& b) {
        return cast<bool>(f(b, h, i, j, inputs));
      };
    }
  }

  MaskInputs mask_;
  const attention::mod::ModDefinition* mod_ = nullptr;
  std::vector<GeneratorInput<Buffer<>>*> mod_tensors_;
  std::vector<GeneratorInput<Expr>*> mod_scalars_;
  GeneratorInput<Buffer<int32_t, 4>>* key_ranges_in_ = nullptr;
  GeneratorInput<bool>* values_finite_ = nullptr;
  GeneratorOutput<Buffer<int32_t, 4>>* key_ranges_out_ = nullptr;
};

// Decode (and chunked prefill) over a paged KV cache, vLLM's PagedAttention layout: k and v are
// pools of blocks of 2^block_shift key positions, (d, kv_head, slot, block) (any strides but the
// features', so [num_blocks, block_size, Hkv, D] and [num_blocks, Hkv, block_size, D] both pass),
// and key j of batch b is slot j % block_size of block block_table(j / block_size, b). The mask
// arguments are masked_sdpa's; key_lengths are the sequences' cache lengths, and each sequence's
// diagonal is its own: diag(i) = i + diag_offset + key_lengths(b) - query_lengths(b) (the runtime
// passes 0 for bottom-right alignment of the valid query rows with the cache's last keys).
// Inputs: q, k, v, scale, the mask arguments, block_table (Int32 (blk, b)), block_shift,
// key_split; outputs out and logsumexp. Decode tiling only (CPU, CUDA and OpenCL).
class PagedSdpaGenerator : public SdpaGeneratorBase<PagedSdpaGenerator> {
 public:
  // CPU: P·V over every key of each split, no predicate, with a prefetch of v's rows ahead
  // (SdpaInputs::whole_split_pv). Any call gets the same results; it is the faster kernel for one
  // query row per head (with or without GQA) over a [blocks, slots, Hkv, D] pool, where the runtime
  // picks it.
  GeneratorParam<bool> whole_keys{"whole_keys", false};

  void configure() {
    add_operands();
    mask_args_.add_to(*this);
    block_table_ = add_input<Buffer<int32_t, 2>>("block_table");
    block_shift_ = add_input<int32_t>("block_shift");
    add_key_split();
    add_attention_outputs();
  }

  void generate() {
    _halide_user_assert(!prefill()) << "paged_sdpa: query_tiling=decode only\n";
    _halide_user_assert(!(whole_keys && gpu())) << "paged_sdpa: whole_keys is a CPU schedule\n";
    mask_ = mask_args_.masks();
    // Var "b" is AttentionVars' batch variable: every Func that evaluates the band has it.
    const Var b("b");
    // The clamps (no-ops on validated lengths) give bounds inference a range for the band.
    const Expr seq_k = block_table_->dim(0).extent() << *block_shift_;
    mask_.diag_offset = mask_.diag_offset + clamp(mask_.key_length(b), 0, seq_k) -
                        clamp(mask_.query_length(b), 0, q_->dim(1).extent());
    build(&mask_, Expr(false), [this, seq_k](SdpaInputs& in) {
      const GeneratorInput<Buffer<>>&q = *q_, &k = *k_;
      const Func table = *block_table_;
      in.seq_k = seq_k;
      in.heads_per_kv = q.dim(2).extent() / k.dim(1).extent();
      in.whole_split_pv = whole_keys;
      in.k = widened(paged(*k_, table, seq_k, "k_paged"), kv_type, "k_f32");
      // The GPU's P·V blocks round Dv up to whole thread tiles: zeros past the last feature.
      in.v = widened(paged(*v_, table, seq_k, "v_paged", gpu()), kv_type, "v_f32");
    });
    // CPU: a position's rows of every kv head are adjacent in a paged pool, so items cover every
    // head. The GPU's blocks are (key split, query tile, head) as for contiguous caches.
    if (!gpu()) {  // the CPU items' loop order follows the pools' (schedule_decode_stages)
      PagedItems& items = plan_.paged;
      items.all_heads = true;
      items.k_heads_outer = k_->dim(1).stride() > k_->dim(2).stride();
      items.v_heads_outer = v_->dim(1).stride() > v_->dim(2).stride();
      items.k_pool = static_cast<ImageParam>(*k_).parameter();
      items.v_pool = static_cast<ImageParam>(*v_).parameter();
      // At least 32 rows ahead: one position at 32 kv heads, 32 positions at one.
      items.prefetch_keys = max(1, 32 / max(v_->dim(1).extent(), 1));
    }
    block_table_->set_estimates({{0, 1024 / 16}, {0, 1}});
    block_shift_->set_estimate(4);
  }
  void schedule() { schedule_attention(); }

 private:
  // The pool read at the sequence's key positions (x, j, kv_head, b). Positions past the table
  // (tiles round up) and table entries past a sequence's length (unused, any value) are clamped
  // into the pool: the keys there are masked by key_lengths, and the decode P·V is NaN-safe.
  // pad_features: zeros past the pool's last feature.
  Func paged(const GeneratorInput<Buffer<>>& pool, Func table, const Expr& seq_k,
             const std::string& name, bool pad_features = false) {
    Var x, j, h, bb;
    Expr jj = clamp(j, 0, seq_k - 1);
    Expr column = clamp(jj >> *block_shift_, 0, block_table_->dim(0).extent() - 1);
    Expr block = clamp(table(column, bb), pool.dim(3).min(), pool.dim(3).max());
    Expr slot = clamp(jj - (column << *block_shift_), 0, pool.dim(2).extent() - 1);
    Func source = pad_features ? zero_pad_features(pool) : Func(pool);
    Func gathered(name);
    gathered(x, j, h, bb) = source(x, h, slot, block);
    return gathered;
  }

  MaskArguments mask_args_;
  MaskInputs mask_;
  GeneratorInput<Buffer<int32_t, 2>>* block_table_ = nullptr;
  GeneratorInput<int32_t>* block_shift_ = nullptr;
};

// Nadaraya–Watson kernel regression as attention: out_i = sum_j f(q_i, k_j) v_j / sum_j f(q_i, k_j)
// with a kernel of the distance u = ‖q_i − k_j‖ / bandwidth. The input `scale` carries
// 1 / bandwidth². The weights go through the softmax as logits log f: Gaussian −u²/2 (so far
// queries still get the nearest keys' weights instead of 0/0), boxcar 0 for u <= 1, Epanechnikov
// log(1 − u) for u < 1, -inf (weight 0) elsewhere. A row no key reaches outputs zeros and
// logsumexp (log sum_j f) -inf. The runtime maps [B, S, D] tensors to one head.
class KernelRegressionGenerator : public SdpaGeneratorBase<KernelRegressionGenerator> {
 public:
  // Inputs q, k, v, scale, kernel (int32: 0 Gaussian, 1 boxcar, 2 Epanechnikov), values_finite,
  // key_split; outputs out and logsumexp (log sum_j f(q_i, k_j)).
  void configure() {
    add_operands();
    kernel_ = add_input<int32_t>("kernel");
    values_finite_ = add_input<bool>("values_finite");
    add_key_split();
    add_attention_outputs();
  }

  void generate() {
    Expr inverse_bandwidth_squared = *scale_;
    Expr kind = *kernel_;
    build(nullptr, *values_finite_, [=](SdpaInputs& in) {
      in.scale = 1.0f;
      in.score_term = [](const Expr& q_d, const Expr& k_d, const Expr&) {
        return (q_d - k_d) * (q_d - k_d);
      };
      in.hides_keys = true;
      in.logit_cases = {kind == 0, kind == 1};
      in.logit_of_score = [=](const Expr& distance_squared) {
        Expr u2 = distance_squared * inverse_bandwidth_squared;
        Expr minus_inf = Float(32).min();
        Expr epanechnikov = 1.0f - sqrt(u2);
        Expr logit = select(kind == 0, -0.5f * u2,                           //
                            kind == 1, select(u2 <= 1.0f, 0.0f, minus_inf),  //
                            select(epanechnikov > 0.0f, log(epanechnikov), minus_inf));
        // NaN distances stay NaN (a comparison would turn them into weight 0).
        return select(is_nan(u2), u2, logit);
      };
    });
  }
  void schedule() { schedule_attention(); }

 private:
  GeneratorInput<int32_t>* kernel_ = nullptr;
  GeneratorInput<bool>* values_finite_ = nullptr;
};

// Whether the SDPA schedules honour a tiling on a target, without generating a kernel: it stops
// with sdpa_plan's message naming the parameter, as the kernel's generator would. attention-gen
// runs it (header only, a second) so a bad --schedule value is refused at configure time. Its
// output is a placeholder.
class TilingCheckGenerator : public Generator<TilingCheckGenerator> {
 public:
  GeneratorParam<QueryTiling> query_tiling{
      "query_tiling",
      QueryTiling::Prefill,
      {{"prefill", QueryTiling::Prefill}, {"decode", QueryTiling::Decode}}};
  TilingParams tiling;
  Output<Buffer<int32_t, 1>> honoured{"honoured"};

  void generate() {
    sdpa_plan(get_target(), get_target(), query_tiling == QueryTiling::Prefill, tiling);
    Var i("i");
    honoured(i) = 1;
  }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(SdpaGenerator, sdpa)
HALIDE_REGISTER_GENERATOR(MaskedSdpaGenerator, masked_sdpa)
HALIDE_REGISTER_GENERATOR(KernelRegressionGenerator, kernel_regression)
HALIDE_REGISTER_GENERATOR(PagedSdpaGenerator, paged_sdpa)
HALIDE_REGISTER_GENERATOR(ModSdpaGenerator, mod_sdpa)
HALIDE_REGISTER_GENERATOR(TilingCheckGenerator, tiling_check)
