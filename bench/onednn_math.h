// The attention "math path" composed from oneDNN primitives, the strongest CPU peer a user would
// pick: a batched matmul S = scale·Q·Kᵀ (+ the additive mask as a binary post-op), an in-place
// softmax over each score row, a batched matmul O = P·V. Heads are processed in chunks whose scores
// fit a fixed workspace, so long sequences do not materialize B·H·Sq·Sk scores at once.
// Rows that the mask hides entirely come out as zeros (oneDNN's softmax would give NaN), as ours.
#pragma once

#include <array>
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

namespace bench {

// Strides (in floats) of an operand seen as [B, Hkv, group, S, D]: query head h = kv·group + j.
using Strides5 = std::array<int64_t, 5>;

struct OneDnnLayout {
  int64_t b, hkv, group, sq, sk, d;
  Strides5 q, k, v, out;  // k, v: the group stride is ignored (shared by the group's heads)
  // The additive mask, [mask_planes, Sq, Sk] (0 = none, 1 = shared, B = one per batch), and
  // whether it applies to every head; only supported with group == 1.
  int64_t mask_planes = 0;
};

// Row-major [B, H, S, D] with H = hkv·group.
Strides5 contiguous_bhsd(int64_t h, int64_t group, int64_t s, int64_t d);

class OneDnnAttention {
 public:
  // mask: [mask_planes, Sq, Sk] additive (0 or -inf), read once here for the fully hidden rows
  // and at every run(); may be null when mask_planes == 0. bf16: q, k, v and out are bf16 (as a
  // framework's bf16 model passes them): the matmuls take bf16 operands with fp32 scores, the
  // softmax runs in fp32 and its output is reordered to bf16 for P·V.
  OneDnnAttention(const OneDnnLayout& layout, float scale, const float* mask, bool bf16 = false,
                  int64_t workspace_bytes = int64_t(16) << 20);
  // threads: OpenMP threads for oneDNN's primitives. Pointers to float, or to bf16 elements.
  void run(const void* q, const void* k, const void* v, void* out, int threads);

 private:
  OneDnnLayout layout_;
  const float* mask_;
  int64_t chunk_batches_ = 1, chunk_heads_ = 1;  // kv heads per chunk (all of a batch's, or fewer)
  std::vector<std::vector<int64_t>> hidden_rows_;  // per mask plane: query rows that see no key
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::matmul scores_, values_;
  dnnl::softmax_forward softmax_;
  dnnl::reorder to_probs_;  // bf16 only: softmax output (fp32) -> P (bf16)
  dnnl::memory::desc q_md_, k_md_, v_md_, out_md_, scores_md_, probs_md_, mask_md_;
  int64_t element_bytes_ = 4;
  std::vector<float> workspace_;
  std::vector<uint16_t> probs_;
};

// A plain fp32 matmul with bias through oneDNN: y [rows, n] = x [rows, k] · Wᵀ + bias, W [n, k].
class OneDnnLinear {
 public:
  OneDnnLinear(int64_t rows, int64_t k, int64_t n);
  void run(const float* x, const float* w, const float* bias, float* y, int threads);

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::matmul matmul_;
  dnnl::memory::desc x_md_, w_md_, bias_md_, y_md_;
};

// "oneDNN <version> (<ISA it runs>)", for the benchmark's context.
std::string onednn_description();

}  // namespace bench
