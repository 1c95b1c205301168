// Score and mask modifications ("mods") written by users, compiled ahead of time into fused SDPA
// kernels (docs/mods.md). A mod is a C++ file of Halide expressions; the
// attention generators splice it into the masked SDPA algorithm and keep their own schedules, so
// a mod needs no scheduling. One file may define several mods:
//
//   #include <attention/generator/mod.h>
//   using namespace attention::mod;
//
//   // Packed sequences: a query sees the keys of its own document only.
//   ATTENTION_MOD(document_mask)
//       .tensor("document_ids", Int32, {Batch, Keys})  // [B, Sk], as the call passes it
//       .mask_mod([](Expr b, Expr h, Expr q_idx, Expr kv_idx, const ModInputs& in) {
//         return in("document_ids")(b, q_idx) == in("document_ids")(b, kv_idx);
//       });
//
// Positions: q_idx in [0, Sq), kv_idx in [0, Sk), h the query head, b the batch. score_mod gets
// the scaled score (scale · q·k) and returns the logit; mask_mod returns true where the query may
// attend to the key. Both are pure functions of their arguments and the mod's inputs. The mod says
// everything a call masks: causal, windows or padding go into its mask_mod (the call's built-in
// MaskOptions are refused).
//
// Block skipping: a mod with a mask_mod gets a key_ranges kernel (mod_sdpa output=key_ranges)
// that evaluates mask_mod on every (query, key) pair once per call, vectorized (a pass far cheaper
// than the scores), and writes the first and last key each tile of queries may see; the prefill
// kernel computes only the key blocks between them. Masks whose visible keys form one range per
// tile (causal, windows, documents, prefixes) skip everything they hide; a mask with holes inside
// a tile's range computes the holes and hides them element by element.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "Halide.h"
#include "attention/generator/math.h"

namespace attention::mod {

using Halide::Expr;

// Element types of a mod's inputs.
inline const Halide::Type Int32 = Halide::Int(32);
inline const Halide::Type Float32 = Halide::Float(32);
inline const Halide::Type UInt8 = Halide::UInt(8);

// The extent a dimension of a mod's tensor must have: the call's batch B, query heads H, queries
// Sq or keys Sk (checked at every call, with an error naming the tensor), or any extent >= 1.
enum class Extent { Batch, Heads, Queries, Keys, Any };
inline constexpr Extent Batch = Extent::Batch;
inline constexpr Extent Heads = Extent::Heads;
inline constexpr Extent Queries = Extent::Queries;
inline constexpr Extent Keys = Extent::Keys;
inline constexpr Extent Any = Extent::Any;

// A tensor the mod reads, row-major like the runtime's TensorView: dims[0] is the outermost.
struct TensorSpec {
  std::string name;
  Halide::Type type;
  std::vector<Extent> dims;
};

// A scalar the mod reads (a prefix length, a temperature).
struct ScalarSpec {
  std::string name;
  Halide::Type type;
};

// A mod's inputs inside its functions. in("bias")(h, bucket) reads tensor "bias" at row-major
// indices (outermost first); every index is clamped into the tensor (reads never leave it), so a
// data-dependent index (a parent pointer, a bucket) is safe. in.scalar("prefix") is a scalar.
// seq_q() and seq_k() are the call's Sq and Sk.
class ModInputs {
 public:
  class Tensor {
   public:
    Tensor() = default;
    explicit Tensor(Halide::Func f, int rank) : f_(std::move(f)), rank_(rank) {}
    template <typename... Index>
    Expr operator()(Index... index) const {
      return call({Expr(index)...});
    }
    Expr call(std::vector<Expr> row_major) const {
      _halide_user_assert(static_cast<int>(row_major.size()) == rank_)
          << "mod tensor " << f_.name() << " has " << rank_ << " dims, read with "
          << row_major.size() << " indices\n";
      return f_(std::vector<Expr>(row_major.rbegin(), row_major.rend()));
    }

   private:
    Halide::Func f_;
    int rank_ = 0;
  };

  Tensor operator()(const std::string& name) const {
    for (const auto& [n, t] : tensors_) {
      if (n == name) return t;
    }
    _halide_user_error << "the mod declares no tensor named '" << name << "'\n";
    return {};
  }
  Expr scalar(const std::string& name) const {
    for (const auto& [n, s] : scalars_) {
      if (n == name) return s;
    }
    _halide_user_error << "the mod declares no scalar named '" << name << "'\n";
    return {};
  }
  Expr seq_q() const { return seq_q_; }
  Expr seq_k() const { return seq_k_; }

  // Filled by the generator.
  void add_tensor(const std::string& name, Tensor t) { tensors_.emplace_back(name, std::move(t)); }
  void add_scalar(const std::string& name, Expr e) { scalars_.emplace_back(name, std::move(e)); }
  void set_lengths(Expr seq_q, Expr seq_k) {
    seq_q_ = std::move(seq_q);
    seq_k_ = std::move(seq_k);
  }

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::vector<std::pair<std::string, Expr>> scalars_;
  Expr seq_q_, seq_k_;
};

using ScoreMod =
    std::function<Expr(Expr score, Expr b, Expr h, Expr q_idx, Expr kv_idx, const ModInputs& in)>;
using MaskMod = std::function<Expr(Expr b, Expr h, Expr q_idx, Expr kv_idx, const ModInputs& in)>;

// A mod: its name (a C++ identifier), its inputs, and its functions (either may be absent).
struct ModDefinition {
  std::string name;
  std::vector<TensorSpec> tensors;
  std::vector<ScalarSpec> scalars;
  ScoreMod score_mod;
  MaskMod mask_mod;
};

// Every mod linked into the generator executable, by name.
inline std::vector<ModDefinition>& registered_mods() {
  static std::vector<ModDefinition> mods;
  return mods;
}
inline const ModDefinition* find_mod(const std::string& name) {
  for (const ModDefinition& m : registered_mods()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

// Builds a ModDefinition; ATTENTION_MOD registers it.
class Mod {
 public:
  explicit Mod(std::string name) { def_.name = std::move(name); }
  Mod& tensor(std::string name, Halide::Type type, std::vector<Extent> dims) {
    def_.tensors.push_back({std::move(name), type, std::move(dims)});
    return *this;
  }
  Mod& scalar(std::string name, Halide::Type type) {
    def_.scalars.push_back({std::move(name), type});
    return *this;
  }
  Mod& score_mod(ScoreMod f) {
    def_.score_mod = std::move(f);
    return *this;
  }
  Mod& mask_mod(MaskMod f) {
    def_.mask_mod = std::move(f);
    return *this;
  }
  const ModDefinition& definition() const { return def_; }

 private:
  ModDefinition def_;
};

struct Registration {
  Registration(const Mod& mod) {  // NOLINT: implicit, so ATTENTION_MOD reads as a declaration
    _halide_user_assert(find_mod(mod.definition().name) == nullptr)
        << "two mods named " << mod.definition().name << "\n";
    registered_mods().push_back(mod.definition());
  }
};

// tanh(x), vectorized (Halide's tanh is a scalar libm call): for logit soft-capping,
// cap · tanh(score / cap), exactly as the built-in softcap computes it.
inline Expr fast_tanh(const Expr& x) { return attention::math::tanh_vectorizable(x); }

}  // namespace attention::mod

// Declares and registers a mod named `name`; follow it with the builder calls and a semicolon.
#define ATTENTION_MOD(name)                                                       \
  static const ::attention::mod::Registration attention_mod_registration_##name = \
      ::attention::mod::Mod(#name)
