// The consumer's own mods (attention/generator/mod.h from the installed package), compiled into
// kernels by attention_add_mod_library (CMakeLists.txt) and called by consumer_mods.cpp.
#include <attention/generator/mod.h>

using namespace attention::mod;

// A causal window of `window` keys before the diagonal (the last query sees the last key), with
// the scores soft-capped at `softcap`: a mask_mod (key splits outside the window are skipped) and
// a score_mod, both reading scalars.
ATTENTION_MOD(windowed_softcap)
    .scalar("window", Int32)
    .scalar("softcap", Float32)
    .score_mod([](Expr score, Expr, Expr, Expr, Expr, const ModInputs& in) {
      const Expr cap = in.scalar("softcap");
      return cap * fast_tanh(score / cap);
    })
    .mask_mod([](Expr, Expr, Expr q_idx, Expr kv_idx, const ModInputs& in) {
      const Expr diagonal = q_idx + in.seq_k() - in.seq_q();
      return kv_idx <= diagonal && kv_idx >= diagonal - in.scalar("window");
    });

// A learned bias per head added to every score: a score_mod reading a tensor.
ATTENTION_MOD(head_bias)
    .tensor("bias", Float32, {Heads})
    .score_mod([](Expr score, Expr, Expr h, Expr, Expr, const ModInputs& in) {
      const Expr bias = in("bias")(h);
      return score + bias;
    });
