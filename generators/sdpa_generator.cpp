// Generator for fp32 scaled dot-product attention: out [B,H,Sq,Dv] and logsumexp [B,H,Sq].
//
// GeneratorParam query_tiling picks the CPU schedule: "prefill" (48-query tiles, register blocks
// across queries) or "decode" (stages along keys and features, for one or two queries). The runtime
// dispatches between the two by Sq.
#include "Halide.h"
#include "algorithm/sdpa.h"
#include "schedule/cpu.h"

namespace {

using namespace Halide;
using namespace attention_gen;

enum class QueryTiling { Prefill, Decode };

// Repeats the first/last position (dim 1) so register blocks that round a tile up may read past the
// end of a sequence without leaving the buffer. Feature dims are never clamped: a per-lane clamp
// turns vector loads into gathers, so the schedule keeps those blocks in bounds instead.
Func clamp_positions(const GeneratorInput<Buffer<float, 4>>& in) {
  Region bounds(4);
  bounds[1] = Range(in.dim(1).min(), in.dim(1).extent());
  return BoundaryConditions::repeat_edge(in, bounds);
}

// v extended with zeros past its last feature (dim 0), so blocks may round Dv up.
Func zero_pad_features(const GeneratorInput<Buffer<float, 4>>& in) {
  Region bounds(4);
  bounds[0] = Range(in.dim(0).min(), in.dim(0).extent());
  return BoundaryConditions::constant_exterior(in, 0.0f, bounds);
}

class SdpaGenerator : public Generator<SdpaGenerator> {
 public:
  GeneratorParam<QueryTiling> query_tiling{
      "query_tiling",
      QueryTiling::Prefill,
      {{"prefill", QueryTiling::Prefill}, {"decode", QueryTiling::Decode}}};

  // Tests only: derive the tiling from this target (e.g. x86-64-linux-avx512_skylake) instead of
  // the compile target, so a machine without AVX-512 can still execute and check the AVX-512 tile
  // logic.
  GeneratorParam<std::string> tiling_as{"tiling_as", ""};

  Input<Buffer<float, 4>> q{"q"};  // (d, i, h, b)
  Input<Buffer<float, 4>> k{"k"};  // (d, j, kv_head, b)
  Input<Buffer<float, 4>> v{"v"};  // (c, j, kv_head, b)
  Input<float> scale{"scale"};
  Output<Buffer<float, 4>> out{"out"};              // (c, i, h, b)
  Output<Buffer<float, 3>> logsumexp{"logsumexp"};  // (i, h, b)

  void generate() {
    SdpaInputs in;
    in.q = clamp_positions(q);
    in.k = clamp_positions(k);
    // Prefill stages v per head, padded with zero features so P·V blocks never need a tail; decode
    // reads v once and in place (P·V reduces over exactly [0, Sk), so no clamp is needed).
    in.v = prefill() ? zero_pad_features(v) : Func(v);
    in.scale = scale;
    in.head_dim = q.dim(0).extent();
    in.value_dim = v.dim(0).extent();
    in.seq_k = k.dim(1).extent();
    in.heads_per_kv = q.dim(2).extent() / k.dim(2).extent();
    funcs_ = scaled_dot_product(in);
    out = funcs_.out;
    logsumexp = funcs_.logsumexp;
    // logsumexp covers exactly out's rows; stating it lets the schedule fuse their loops exactly.
    for (int dim = 0; dim < 3; ++dim) {
      logsumexp.dim(dim).set_bounds(out.dim(dim + 1).min(), out.dim(dim + 1).extent());
    }
    set_estimates();
  }

  void schedule() {
    if (using_autoscheduler()) return;
    const std::string tiling_target = tiling_as;
    schedule_sdpa_cpu(funcs_, tiling_target.empty() ? get_target() : Target(tiling_target),
                      prefill());
  }

 private:
  SdpaFuncs funcs_;

  bool prefill() const { return query_tiling == QueryTiling::Prefill; }

  void set_estimates() {
    const int sq = prefill() ? 1024 : 1;
    const int sk = 1024, d = 64, heads = 8, batch = 1;
    q.set_estimates({{0, d}, {0, sq}, {0, heads}, {0, batch}});
    k.set_estimates({{0, d}, {0, sk}, {0, heads}, {0, batch}});
    v.set_estimates({{0, d}, {0, sk}, {0, heads}, {0, batch}});
    scale.set_estimate(0.125f);
    out.set_estimates({{0, d}, {0, sq}, {0, heads}, {0, batch}});
    logsumexp.set_estimates({{0, sq}, {0, heads}, {0, batch}});
  }
};

}  // namespace

HALIDE_REGISTER_GENERATOR(SdpaGenerator, sdpa)
