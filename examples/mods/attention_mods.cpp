// Example score and mask mods (attention/generator/mod.h), compiled into fused SDPA kernels by the
// build (examples/CMakeLists.txt) and checked against naive loops applying the same mods
// (tests/mod_attention_test.cpp). Each is a complete mod a user could copy into their own file.
#include <attention/generator/mod.h>

using namespace attention::mod;

namespace {

// The diagonal of query q_idx when the last query sees the last key (a KV cache; top-left
// alignment when Sq == Sk), as the built-in Causal::BottomRight.
Expr diagonal(const Expr& q_idx, const ModInputs& in) { return q_idx + in.seq_k() - in.seq_q(); }

}  // namespace

// Causal attention as a mask mod (the built-in Causal::BottomRight).
ATTENTION_MOD(causal).mask_mod([](Expr, Expr, Expr q_idx, Expr kv_idx, const ModInputs& in) {
  return kv_idx <= diagonal(q_idx, in);
});

// A causal sliding window of `window` keys before the diagonal (built-in: causal + window).
ATTENTION_MOD(sliding_window)
    .scalar("window", Int32)
    .mask_mod([](Expr, Expr, Expr q_idx, Expr kv_idx, const ModInputs& in) {
      const Expr diag = diagonal(q_idx, in);
      return kv_idx <= diag && kv_idx >= diag - in.scalar("window");
    });

// Gemma-2 soft-capping, then ALiBi with per-head slopes (built-in: softcap + alibi_slopes).
ATTENTION_MOD(alibi_softcap)
    .tensor("slopes", Float32, {Heads})
    .scalar("softcap", Float32)
    .score_mod([](Expr score, Expr, Expr h, Expr q_idx, Expr kv_idx, const ModInputs& in) {
      const Expr cap = in.scalar("softcap");
      const Expr distance = Halide::cast<float>(Halide::abs(kv_idx - diagonal(q_idx, in)));
      const Expr slope = in("slopes")(h);
      return cap * fast_tanh(score / cap) - slope * distance;
    });

// Packed sequences: a query sees the keys of its own document only. document_ids [B, Sk] numbers
// the document of every position (queries and keys are the same positions, Sq == Sk).
ATTENTION_MOD(document_mask)
    .tensor("document_ids", Int32, {Batch, Keys})
    .mask_mod([](Expr b, Expr, Expr q_idx, Expr kv_idx, const ModInputs& in) {
      return in("document_ids")(b, q_idx) == in("document_ids")(b, kv_idx);
    });

// T5's relative position bias: a learned bias per head and bucket of the relative position
// kv_idx - q_idx (bidirectional, 32 buckets, max_distance 128). bias [H, 32]. The log-spaced
// buckets in integers: 8 + floor(2·log2(n/8)) = 8 + #{k >= 1 : n² >= 64·2^k}, exact.
ATTENTION_MOD(t5_bias)
    .tensor("bias", Float32, {Heads, Any})
    .score_mod([](Expr score, Expr, Expr h, Expr q_idx, Expr kv_idx, const ModInputs& in) {
      const Expr relative = kv_idx - q_idx;
      // |relative|, capped where the bucket stops growing (and n² cannot overflow).
      const Expr n = Halide::min(Halide::cast<int32_t>(Halide::abs(relative)), 1024);
      Expr large = 8;
      for (int k = 1; k <= 7; ++k) large += Halide::select(n * n >= (64 << k), 1, 0);
      const Expr bucket =
          Halide::select(relative > 0, 16, 0) + Halide::select(n < 8, n, Halide::min(large, 15));
      return score + in("bias")(h, bucket);
    });

// Prefix-LM: every query sees the first prefix_lengths[b] keys (the prompt, bidirectional) and is
// causal after them.
ATTENTION_MOD(prefix_lm)
    .tensor("prefix_lengths", Int32, {Batch})
    .mask_mod([](Expr b, Expr, Expr q_idx, Expr kv_idx, const ModInputs& in) {
      return kv_idx < in("prefix_lengths")(b) || kv_idx <= q_idx;
    });

// Tree (speculative) decoding: the Sq queries are draft tokens of a tree appended after Sk - Sq
// cached keys. Each draft sees every cached key and, among the drafts, its ancestors and itself:
// bit t of tree_ancestors[b, i] is set when draft t is one of them (at most 32 drafts).
ATTENTION_MOD(tree_mask)
    .tensor("tree_ancestors", Int32, {Batch, Queries})
    .mask_mod([](Expr b, Expr, Expr q_idx, Expr kv_idx, const ModInputs& in) {
      const Expr cached = in.seq_k() - in.seq_q();
      const Expr draft = Halide::clamp(kv_idx - cached, 0, 31);
      const Expr ancestors = in("tree_ancestors")(b, q_idx);
      return kv_idx < cached || ((ancestors >> draft) & 1) == 1;
    });
