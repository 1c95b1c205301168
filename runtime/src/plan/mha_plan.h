// One multi_head_attention call's plan: what runs, decided once from the checked call by plan_mha
// (a pure function: it allocates nothing and runs nothing) and run by execute_mha
// (execute/mha_execute.cpp), which follows it and decides nothing. explain_mha prints it, and
// ATTENTION_LOG_PLAN=1 logs every call's plan to stderr.
//
// The candidates, in order (the first that takes the call runs it):
//   nothing   out is empty (B or Sq is 0)
//   widened   a Float16/BFloat16 tensor: every half input widened exactly into fp32 scratch, the
//             fp32 call planned over the copies (then), out rounded once
//   no-keys   Sk = 0: every row sees no key, out is b_o (zeros without it)
//   gpu       a GPU backend: the fused block in chunks of batches and query rows, every head in
//             each, whose split results fit options.gpu.workspace_limit
//   kernel    CPU: the fused block (projections, attention, output projection in one kernel),
//             then the attention weights where asked for (the weights kernel over Q and K
//             projected again)
// Calls with a mask take the masked kernel; a mask of pieces that hide no key is dropped first.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "call/mha_call.h"
#include "execute/gpu.h"
#include "kernels/kernel_choice.h"

namespace attention::detail {

enum class MhaRoute { Nothing, Widened, NoKeys, Gpu, Kernel };

struct MhaPlan {
  Run run = Run::CPU;
  MhaRoute route = MhaRoute::Nothing;
  bool masked = false;            // Gpu, Kernel: the masked kernel
  const char* kernel = nullptr;   // Gpu, Kernel: a static name
  std::vector<GpuChunk> chunks;   // Gpu
  bool weights = false;           // Kernel: options.attention_weights is given
  std::unique_ptr<MhaPlan> then;  // Widened: the fp32 call's plan

  // One line: "route backend=... [kernel=...] [...] [then: <the fp32 call's plan>]".
  std::string describe() const;
};

// The plan of a call whose checks passed, on backend `run`, its mask without inert pieces. Fails
// only where a GPU call's chunks do not fit options.gpu.workspace_limit or a Device::CUDA call has
// no keys, before anything is written.
Status plan_mha(Run run, const TensorView& x_q, const TensorView& x_kv, const Projections& p,
                const TensorView& out, const MhaShape& s, const MhaOptions& options, MhaPlan* plan);

// Runs `plan` on the call's tensors (or the fp32 copies a widened plan made). Decides nothing,
// checks nothing, enters no public or checked entry point.
Status execute_mha(const MhaPlan& plan, const TensorView& x_q, const TensorView& x_kv,
                   const Projections& p, const TensorView& out, const MhaShape& s,
                   const MhaOptions& options);

}  // namespace attention::detail
