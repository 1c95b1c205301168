// Generator "sdpa_amx_head": bfloat16 prefill of one head on Intel AMX (tdpbf16ps tiles),
// unmasked or causal. The runtime (runtime/src/execute/amx_prefill.cpp) packs each kv head's K and
// V once and calls it per query head and chunk of rows, in parallel (a causal chunk on the keys
// it sees).
//
// Inputs, all bfloat16, every min 0:
//   q  (d, i)     one head's queries, D a multiple of 32 (a tile row holds 32 bfloat16).
//   kp (p, j, dp) keys in AMX's VNNI layout, one 16-key tile after another: key 16 t + l's
//                 features 2 dp + p at kp(p, l + 8 D t, dp), strides (1, 2, 32), so each
//                 tile is D/2 rows of 64 contiguous bytes (16 D values in a row); zeros for
//                 keys past Sk, to Sk rounded up to 32. (A tile index of its own, a fourth
//                 dimension, is a term Halide 21's AMX matcher does not fold.)
//   vp (p, c, jp) values in the VNNI layout: vp(p, c, jp) = v(c, 2 jp + p), zeros for keys past
//                 Sk; c spans Dv, a multiple of 16 (one accumulator tile's columns).
//   scale, seq_k (Sk >= 1), causal_offset (row i sees keys j <= i + causal_offset).
// Outputs: out (c, i) bfloat16 (rounded once, to nearest even) and lse (i) fp32, natural-log
// logsumexp of the scaled scores.
//
// Per work item (a tile of query rows): S = q·kᵀ on AMX into blocks of 32 keys, the row max, the
// weights P = exp(scale·(S - max)), rounded to bfloat16 for P·V (FlashAttention's P; the row sum
// and logsumexp take them unrounded), then P·V on AMX. The whole row of scores stays in the work
// item's scratch (QT × Sk fp32), so no split results and no combine: one pass over the keys per
// matmul.
//
// Halide 21's AMX lowering (ExtractTileOperations) matches index shapes exactly; what it needs,
// found by reducing generators that failed with "Store to AMX tile allocation of a non-tile value":
// - operands as 2-D (lhs) and 3-D VNNI (rhs) buffers with no further dimension: a head or batch
//   index adds a term the matcher does not fold, hence one head per call;
// - the rhs from an input buffer: a stage computed in the pipeline has an even stride that the
//   simplifier turns into shifts, which the matcher does not read;
// - the tile consumer's allocation with constant strides and constant extents (bound_extent):
//   a dynamic row stride leaves a broadcast-times-ramp the matcher does not read. Hence the scores
//   in blocks of 32 keys, S(jj, i, jb).
#include "Halide.h"
#include "algorithm/bfloat16.h"
#include "lowering/amx_jam.h"

namespace {

using namespace Halide;

// attention::math::exp2_nonpositive(x, coarse = true), the same clamp, polynomial and scaling,
// with a NaN kept by the clamp itself rather than by a select on is_nan: written as a strict
// select(x < -127, -127, x), LLVM makes it a vmaxps whose NaN operand is the one returned, and
// the NaN runs through to the result (p is NaN). Two instructions fewer per 16 weights;
// Bf16Prefill.AmxNanScoresComeOutNaN checks the NaN.
Expr exp2_keeping_nan(const Expr& x_in) {
  const Expr x = strict_float(select(x_in < -127.0f, -127.0f, x_in));
  // n = x rounded to nearest even by the 1.5 * 2^23 shift, whose sum holds n in its low mantissa
  // bits: shifted left by 23 they are n's biased exponent less 127, the higher bits shifted out
  // (no cvttps2dq).
  const Expr shifted = strict_float(x + 12582912.0f);
  const Expr n = strict_float(shifted - 12582912.0f);
  const Expr f = x - n;
  Expr p = 0.0f;
  for (const float c : {9.570101276040077e-3f, 5.591786280274391e-2f, 2.402474433183670e-1f,
                        6.931217908859253e-1f, 9.999992847442627e-1f}) {
    p = p * f + c;
  }
  return p * reinterpret<float>((reinterpret<int32_t>(shifted) << 23) + (127 << 23));
}

class SdpaAmxHead : public Generator<SdpaAmxHead> {
 public:
  // Query rows per work item: two accumulator tiles of 16 rows.
  GeneratorParam<int> query_tile{"query_tile", 32};

  Input<Buffer<bfloat16_t, 2>> q{"q"};
  Input<Buffer<bfloat16_t, 3>> kp{"kp"};
  Input<Buffer<bfloat16_t, 3>> vp{"vp"};
  Input<float> scale{"scale"};
  Input<int32_t> seq_k{"seq_k"};
  // Causal masks: row i sees key j only if j <= i + causal_offset (the runtime passes 1 << 30 for
  // none, and keeps each row's first key visible).
  Input<int32_t> causal_offset{"causal_offset"};
  Output<Buffer<bfloat16_t, 2>> out{"out"};
  Output<Buffer<float, 1>> lse{"lse"};

  void generate() {
    _halide_user_assert(get_target().has_feature(Target::AVX512_SapphireRapids))
        << "sdpa_amx_head needs a target with avx512_sapphirerapids (AMX), got "
        << get_target().to_string() << "\n";
    for (int d = 0; d < 2; ++d) q.dim(d).set_min(0);
    for (int d = 0; d < 3; ++d) kp.dim(d).set_min(0), vp.dim(d).set_min(0);
    // The tile loads read 64 contiguous bytes a row: a key's pair of features (kp), a pair of
    // keys' values (vp) and q's features next to each other.
    q.dim(0).set_stride(1);
    kp.dim(0).set_stride(1), kp.dim(1).set_stride(2);
    vp.dim(0).set_stride(1), vp.dim(1).set_stride(2);
    const Expr D = q.dim(0).extent(), Sk = seq_k;
    const Expr keys = keys_ = vp.dim(2).extent() * 2;  // Sk rounded up to 32
    add_requirement(D % 32 == 0, "sdpa_amx_head: D must be a multiple of 32, got ", D);
    add_requirement(vp.dim(1).extent() % 16 == 0 && vp.dim(1).extent() >= 32,
                    "sdpa_amx_head: Dv must be a multiple of 16, at least 32");
    add_requirement(keys % 32 == 0 && Sk >= 1 && Sk <= keys &&
                        kp.dim(1).extent() >= (D / 2) * 16 * (keys / 16 - 1) + 16 &&
                        kp.dim(2).extent() == D / 2,
                    "sdpa_amx_head: kp and vp must hold Sk rounded up to 32 keys");
    add_requirement(q.dim(1).extent() >= query_tile, "sdpa_amx_head: needs at least ",
                    Expr(int(query_tile)), " query rows");

    // scores(l, i, t) = Σ_d q(d, i) k(d, 16 t + l): tiles of 16 keys, as kp holds them; the
    // softmax reads them as blocks of 32 keys, S(jj, i, jb).
    rd = RDom(0, 32, 0, D / 32, "rd");
    const Expr d = rd.x + 32 * rd.y;
    scores_(jj, i, jb) = 0.0f;
    scores_(jj, i, jb) +=
        cast<float>(cast<float>(q(d, i))) * cast<float>(kp(d % 2, jj + (D / 2) * 16 * jb, d / 2));
    stored_scores_ = scores_.in();
    const auto S = [&](const Expr& key, const Expr& row, const Expr& block) {
      return stored_scores_(key % 16, row, 2 * block + key / 16);
    };

    // The row max and the weights in the log2 domain of the scaled scores (scale may be negative).
    const Expr log2_scale = scale * float(M_LOG2E);
    r32_ = RDom(0, 32, "r32");
    const RDom& r32 = r32_;
    // Each row's key blocks in two parts: the blocks row i sees whole, taken without a per-lane
    // test, and the rest (under a causal mask, the blocks on and past the diagonal; keys past Sk),
    // masked lane by lane. As RDom predicates, which Halide turns into each row's loop bounds; a
    // `likely` select was folded into the lane mask before the loop partitioner saw it, and every
    // block of a causal call took the masked loop (69 instructions per 32 weights, not 45).
    const Expr whole_blocks = clamp(i + causal_offset + 1, 0, Sk) / 32;
    rw_ = RDom(0, keys / 32, "rw");
    rw_.where(rw_ < whole_blocks);
    rp_ = RDom(0, keys / 32, "rp");
    rp_.where(rp_ >= whole_blocks);
    const auto seen = [&](const Expr& lane, const Expr& block) {
      const Expr key = lane + 32 * block;
      return key < Sk && key <= i + causal_offset;
    };
    block_max_(jj, i) = float(-INFINITY);
    block_max_(jj, i) = max(block_max_(jj, i), S(jj, i, rw_) * log2_scale);
    block_max_(jj, i) =
        max(block_max_(jj, i), select(seen(jj, rp_), S(jj, i, rp_) * log2_scale, float(-INFINITY)));
    row_max_(i) = float(-INFINITY);
    row_max_(i) = max(row_max_(i), block_max_(r32, i));

    // P rounded to bfloat16 as P·V takes it, beside each lane's running sum of the unrounded P
    // (logsumexp is an output: it takes the unrounded weights) carried along the row's blocks
    // from block -1, which holds the zero: the sum costs an add in the weights pass instead of a
    // pass of its own over the fp32 weights. Hidden keys' weights (whatever the exponent of a
    // score above the visible max gave) are zero. The coarse exp2 (relative error 2.7e-6) as in
    // the vdpbf16ps kernel. Rounding to nearest with ties toward zero: P is in [0, 1] or NaN
    // (which stays NaN), so two integer operations instead of round_to_bfloat16's eight (ties, 1
    // in 2^16 of values, differ from even by one ulp; + 0x8000 would be matched as a rounding
    // shift, which x86 emulates in six).
    // The exponent strict, so a NaN score stays NaN: computed with fast math, LLVM may assume it
    // is no NaN and let exp2's clamp drop it.
    const auto weight = [&](const Expr& block) {
      return exp2_keeping_nan(strict_float(S(jj, i, block) * log2_scale - row_max_(i)));
    };
    const auto rounded = [](const Expr& w) {
      return reinterpret(BFloat(16), cast<uint16_t>((reinterpret<uint32_t>(w) + 0x7fff) >> 16));
    };
    weights_(jj, i, jb) = Tuple(undef(BFloat(16)), undef<float>());
    weights_(jj, i, -1) = Tuple(cast(BFloat(16), 0.0f), 0.0f);
    const Expr w = weight(rw_);
    weights_(jj, i, rw_) = Tuple(rounded(w), weights_(jj, i, rw_ - 1)[1] + w);
    const Expr wp = select(seen(jj, rp_), weight(rp_), 0.0f);
    weights_(jj, i, rp_) = Tuple(rounded(wp), weights_(jj, i, rp_ - 1)[1] + wp);
    row_sum_(i) = 0.0f;
    row_sum_(i) += weights_(r32, i, keys / 32 - 1)[1];

    // pv(c, i) = Σ_j P(j, i) v(c, j), keys 32 at a time.
    rj = RDom(0, 32, 0, keys / 32, "rj");
    const Expr j = rj.x + 32 * rj.y;
    pv_(c, i) = 0.0f;
    pv_(c, i) +=
        cast<float>(cast<float>(weights_(rj.x, i, rj.y)[0])) * cast<float>(vp(j % 2, c, j / 2));
    stored_pv_ = pv_.in();

    out(c, i) = attention_gen::round_to_bfloat16(stored_pv_(c, i) / row_sum_(i));
    lse(i) = row_max_(i) * float(M_LN2) + log(row_sum_(i));
  }

  void schedule() {
    const int QT = query_tile;
    Var io("io"), ii("ii"), xi("xi"), yi("yi"), yo("yo");
    // Work items: tiles of QT rows, in turn; the last one shifted inwards (hence Sq >= QT). The
    // runtime spreads calls of a few work items over the cores (a causal call's cost grows with
    // its rows; runtime/src/execute/amx_prefill.cpp).
    out.split(i, io, ii, QT, TailStrategy::ShiftInwards).reorder(c, ii, io);
    out.vectorize(c, 16);
    lse.split(i, io, ii, QT, TailStrategy::ShiftInwards);
    lse.compute_with(out, io);

    // Q·Kᵀ: 2 × 2 tiles of 16 rows × 16 keys (two key tiles), 32 features per tdpbf16ps; the
    // constant tile loops are jammed into the feature loop (lowering/amx_jam.h), four
    // accumulators in flight.
    Var to("to"), ti("ti");
    // Stored row-major, a row of keys per query, each row 16 keys longer than the keys: rows a
    // multiple of 4 KiB apart would put a tile store's 16 rows in one L1 set (12 ways), and a
    // stride of 16 floats would make the tile one run of 256 (Halide 21 stores only a 2-D tile).
    stored_scores_.compute_at(out, io)
        .bound_extent(jj, 16)
        .bound_extent(i, QT)
        .reorder_storage(jj, jb, i)
        .bound_storage(jb, keys_ / 16 + 1)
        .split(jb, to, ti, 2)
        .split(i, yo, yi, 16)
        .reorder(jj, yi, ti, yo, to)
        .vectorize(jj)
        .vectorize(yi);
    scores_.compute_at(stored_scores_, ti).store_in(MemoryType::AMXTile).vectorize(jj).vectorize(i);
    scores_.update().reorder(rd.x, jj, i, rd.y).atomic().vectorize(rd.x).vectorize(jj).vectorize(i);

    block_max_.compute_at(out, io).vectorize(jj, 16);
    // Key blocks inside the rows: a row's 32 running lanes stay in registers, its scores are read
    // in order.
    Var jo("jo"), ji("ji");
    for (int u = 0; u < 2; ++u) {
      const RDom& r = u == 0 ? rw_ : rp_;
      block_max_.update(u).split(jj, jo, ji, 16).reorder(ji, jo, r, i).vectorize(ji).unroll(jo);
    }
    // The 32 lanes of each row's block max and block sum reduced as vectors (a horizontal
    // reduction per row, not 32 scalar steps).
    row_max_.compute_at(out, io);
    row_max_.update().atomic().vectorize(r32_);
    // Row-major like the scores, rows padded by one 32-key block (P·V's tile loads), which is
    // block -1, the running sums' zero.
    weights_.compute_at(out, io)
        .bound_extent(jj, 32)
        .bound_extent(i, QT)
        .reorder_storage(jj, jb, i)
        .bound_storage(jb, keys_ / 32 + 1);
    weights_.update(0).vectorize(jj, 16);
    for (int u = 1; u < 3; ++u) {
      const RDom& r = u == 1 ? rw_ : rp_;
      weights_.update(u).split(jj, jo, ji, 16).reorder(ji, jo, r, i).vectorize(ji).unroll(jo);
    }
    row_sum_.compute_at(out, io);
    row_sum_.update().atomic(true).vectorize(r32_);

    // P·V: 2 × 2 tiles of 16 rows × 16 values per 32 values (the last block shifted inwards,
    // hence Dv >= 32), 32 keys per tdpbf16ps, jammed as Q·Kᵀ.
    Var co("co"), ci("ci");
    stored_pv_.compute_at(out, io)
        .bound_extent(i, QT)
        .tile(c, i, xi, yi, 16, 16)
        .split(c, co, ci, 2, TailStrategy::ShiftInwards)
        .reorder(xi, yi, ci, i, co)
        .vectorize(xi)
        .vectorize(yi);
    pv_.compute_at(stored_pv_, ci).store_in(MemoryType::AMXTile).vectorize(c).vectorize(i);
    pv_.update().reorder(rj.x, c, i, rj.y).atomic().vectorize(rj.x).vectorize(c).vectorize(i);

    get_pipeline().add_custom_lowering_pass(new attention_gen::AmxUnrollAndJam);

    q.set_estimates({{0, 64}, {0, 512}});
    kp.set_estimates({{0, 2}, {0, 512}, {0, 32}});
    vp.set_estimates({{0, 2}, {0, 64}, {0, 256}});
    scale.set_estimate(0.125f);
    seq_k.set_estimate(512);
    causal_offset.set_estimate(1 << 30);
    out.set_estimates({{0, 64}, {0, 512}});
    lse.set_estimates({{0, 512}});
  }

 private:
  Var c{"c"}, i{"i"}, jj{"jj"}, jb{"jb"};
  RDom rd, rj, r32_;  // features, keys (32 per tile step), a block's lanes
  RDom rw_, rp_;      // a row's key blocks seen whole, and the rest
  Func scores_{"scores"}, stored_scores_, block_max_{"block_max"}, row_max_{"row_max"};
  Func weights_{"weights"}, row_sum_{"row_sum"};
  Func pv_{"pv"}, stored_pv_;
  Expr keys_;
};

}  // namespace

HALIDE_REGISTER_GENERATOR(SdpaAmxHead, sdpa_amx_head)
