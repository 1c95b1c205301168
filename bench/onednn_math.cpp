// oneDNN's matmul and softmax primitives composed into attention (see onednn_math.h).
#include "onednn_math.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

namespace bench {
namespace {

using dnnl::memory;
using Dims = memory::dims;

constexpr auto kF32 = memory::data_type::f32;

// The largest divisor of n that is at most limit (at least 1).
int64_t largest_divisor_up_to(int64_t n, int64_t limit) {
  for (int64_t c = std::min(n, limit); c > 1; --c)
    if (n % c == 0) return c;
  return 1;
}

Dims contiguous_strides(const Dims& dims) {
  Dims strides(dims.size());
  int64_t stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= dims[i];
  }
  return strides;
}

dnnl::matmul make_matmul(const dnnl::engine& engine, const memory::desc& src,
                         const memory::desc& weights, const memory::desc& dst,
                         const dnnl::primitive_attr& attr = {},
                         const memory::desc& bias = memory::desc()) {
  const dnnl::matmul::desc desc(src, weights, bias, dst);
  return dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine));
}

void* mutable_data(const float* data) { return const_cast<float*>(data); }

}  // namespace

Strides5 contiguous_bhsd(int64_t h, int64_t group, int64_t s, int64_t d) {
  return {h * s * d, group * s * d, s * d, d, 1};
}

OneDnnAttention::OneDnnAttention(const OneDnnLayout& layout, float scale, const float* mask,
                                 bool bf16, int64_t workspace_bytes)
    : layout_(layout),
      mask_(mask),
      engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_),
      element_bytes_(bf16 ? 2 : 4) {
  const OneDnnLayout& l = layout;
  if (l.mask_planes > 0 && l.group != 1)
    throw std::invalid_argument("OneDnnAttention: a mask needs one query head per kv head");
  if (l.mask_planes > 1 && l.mask_planes != l.b)
    throw std::invalid_argument("OneDnnAttention: mask planes must be 1 or B");

  // Chunks: whole batches while their scores fit the workspace, else some kv heads of one batch;
  // always at least one kv head.
  const int64_t head_bytes = l.group * l.sq * l.sk * int64_t(sizeof(float));
  const int64_t fitting_heads = std::max<int64_t>(1, workspace_bytes / head_bytes);
  if (l.mask_planes > 0) {
    // One (batch, head) per call: oneDNN 2.6's brgemm matmul takes the mask post-op only when the
    // scores have no batch dimension to broadcast it over; otherwise it runs its reference
    // implementation (measured 0.6 GFLOP/s at 8×8×512²×64 with a per-batch padding mask).
    chunk_heads_ = 1;
  } else if (fitting_heads >= l.hkv) {
    chunk_heads_ = l.hkv;
    chunk_batches_ = largest_divisor_up_to(l.b, fitting_heads / l.hkv);
  } else {
    chunk_heads_ = largest_divisor_up_to(l.hkv, fitting_heads);
  }

  const int64_t cb = chunk_batches_, ch = chunk_heads_;
  auto md = [](const Dims& dims, const Dims& strides) { return memory::desc(dims, kF32, strides); };
  const auto io = bf16 ? memory::data_type::bf16 : kF32;
  auto io_md = [&](const Dims& dims, const Dims& strides) {
    return memory::desc(dims, io, strides);
  };
  q_md_ = io_md({cb, ch, l.group, l.sq, l.d}, {l.q[0], l.q[1], l.q[2], l.q[3], l.q[4]});
  out_md_ = io_md({cb, ch, l.group, l.sq, l.d}, {l.out[0], l.out[1], l.out[2], l.out[3], l.out[4]});
  // Kᵀ as [.., D, Sk] and V as [.., Sk, D], their group dimension 1: broadcast over the group.
  k_md_ = io_md({cb, ch, 1, l.d, l.sk}, {l.k[0], l.k[1], l.k[1], 1, l.k[3]});
  v_md_ = io_md({cb, ch, 1, l.sk, l.d}, {l.v[0], l.v[1], l.v[1], l.v[3], 1});
  const Dims scores_dims = {cb, ch, l.group, l.sq, l.sk};
  scores_md_ = md(scores_dims, contiguous_strides(scores_dims));
  probs_md_ = io_md(scores_dims, contiguous_strides(scores_dims));
  workspace_.resize(cb * ch * l.group * l.sq * l.sk);
  if (bf16) probs_.resize(workspace_.size());

  dnnl::primitive_attr scores_attr;
  scores_attr.set_output_scales(0, {scale});
  if (l.mask_planes > 0) {
    const Dims mask_dims = {1, 1, 1, l.sq, l.sk};
    mask_md_ = md(mask_dims, contiguous_strides(mask_dims));
    dnnl::post_ops add_mask;
    add_mask.append_binary(dnnl::algorithm::binary_add, mask_md_);
    scores_attr.set_post_ops(add_mask);
  }
  scores_ = make_matmul(engine_, q_md_, k_md_, scores_md_, scores_attr);
  softmax_ = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
      dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, scores_md_, 4), engine_));
  values_ = make_matmul(engine_, probs_md_, v_md_, out_md_);
  if (bf16)
    to_probs_ =
        dnnl::reorder(dnnl::reorder::primitive_desc(engine_, scores_md_, engine_, probs_md_));

  hidden_rows_.resize(l.mask_planes);
  for (int64_t p = 0; p < l.mask_planes; ++p) {
    for (int64_t i = 0; i < l.sq; ++i) {
      const float* row = mask + (p * l.sq + i) * l.sk;
      if (std::all_of(row, row + l.sk, [](float m) { return m == -INFINITY; }))
        hidden_rows_[p].push_back(i);
    }
  }
}

void OneDnnAttention::run(const void* q, const void* k, const void* v, void* out, int threads) {
  omp_set_num_threads(threads);
  const OneDnnLayout& l = layout_;
  const bool bf16 = !probs_.empty();
  memory q_mem(q_md_, engine_, nullptr), k_mem(k_md_, engine_, nullptr),
      v_mem(v_md_, engine_, nullptr), out_mem(out_md_, engine_, nullptr),
      scores_mem(scores_md_, engine_, workspace_.data());
  memory probs_mem = bf16 ? memory(probs_md_, engine_, probs_.data()) : scores_mem;
  // Element offsets into the caller's arrays, whatever their element type.
  auto at = [&](const void* base, int64_t offset) {
    return static_cast<char*>(const_cast<void*>(base)) + offset * element_bytes_;
  };
  for (int64_t b = 0; b < l.b; b += chunk_batches_) {
    for (int64_t h = 0; h < l.hkv; h += chunk_heads_) {
      q_mem.set_data_handle(at(q, b * l.q[0] + h * l.q[1]));
      k_mem.set_data_handle(at(k, b * l.k[0] + h * l.k[1]));
      v_mem.set_data_handle(at(v, b * l.v[0] + h * l.v[1]));
      const int64_t out_chunk = b * l.out[0] + h * l.out[1];
      out_mem.set_data_handle(at(out, out_chunk));
      std::unordered_map<int, memory> scores_args = {
          {DNNL_ARG_SRC, q_mem}, {DNNL_ARG_WEIGHTS, k_mem}, {DNNL_ARG_DST, scores_mem}};
      const int64_t plane = l.mask_planes == 0 ? 0 : b % l.mask_planes;
      if (l.mask_planes > 0) {
        scores_args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] =
            memory(mask_md_, engine_, mutable_data(mask_ + plane * l.sq * l.sk));
      }
      scores_.execute(stream_, scores_args);
      softmax_.execute(stream_, {{DNNL_ARG_SRC, scores_mem}, {DNNL_ARG_DST, scores_mem}});
      if (bf16) to_probs_.execute(stream_, scores_mem, probs_mem);
      values_.execute(
          stream_, {{DNNL_ARG_SRC, probs_mem}, {DNNL_ARG_WEIGHTS, v_mem}, {DNNL_ARG_DST, out_mem}});
      stream_.wait();
      if (l.mask_planes == 0) continue;
      for (int64_t cb = 0; cb < chunk_batches_; ++cb)
        for (int64_t ch = 0; ch < chunk_heads_; ++ch)
          for (int64_t i : hidden_rows_[plane])
            std::memset(at(out, out_chunk + cb * l.out[0] + ch * l.out[1] + i * l.out[3]), 0,
                        l.d * element_bytes_);  // +0.0 in fp32 and bf16 alike
    }
  }
}

OneDnnLinear::OneDnnLinear(int64_t rows, int64_t k, int64_t n)
    : engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_),
      x_md_({rows, k}, kF32, memory::format_tag::ab),
      w_md_({k, n}, kF32, memory::format_tag::ba),  // W [n, k] row-major is Wᵀ [k, n] column-major
      bias_md_({1, n}, kF32, memory::format_tag::ab),
      y_md_({rows, n}, kF32, memory::format_tag::ab) {
  matmul_ = make_matmul(engine_, x_md_, w_md_, y_md_, {}, bias_md_);
}

void OneDnnLinear::run(const float* x, const float* w, const float* bias, float* y, int threads) {
  omp_set_num_threads(threads);
  matmul_.execute(stream_, {{DNNL_ARG_SRC, memory(x_md_, engine_, mutable_data(x))},
                            {DNNL_ARG_WEIGHTS, memory(w_md_, engine_, mutable_data(w))},
                            {DNNL_ARG_BIAS, memory(bias_md_, engine_, mutable_data(bias))},
                            {DNNL_ARG_DST, memory(y_md_, engine_, y)}});
  stream_.wait();
}

std::string onednn_description() {
  const dnnl_version_t* version = dnnl_version();
  std::string isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      isa = "sse41";
      break;
    case dnnl::cpu_isa::avx:
      isa = "avx";
      break;
    case dnnl::cpu_isa::avx2:
      isa = "avx2";
      break;
    case dnnl::cpu_isa::avx2_vnni:
      isa = "avx2_vnni";
      break;
    case dnnl::cpu_isa::avx512_core:
      isa = "avx512_core";
      break;
    case dnnl::cpu_isa::avx512_core_vnni:
      isa = "avx512_core_vnni";
      break;
    case dnnl::cpu_isa::avx512_core_bf16:
      isa = "avx512_core_bf16";
      break;
    case dnnl::cpu_isa::avx512_core_amx:
      isa = "avx512_core_amx";
      break;
    default:
      isa = "other";
      break;
  }
  return "oneDNN " + std::to_string(version->major) + "." + std::to_string(version->minor) + "." +
         std::to_string(version->patch) + " (" + isa + ")";
}

}  // namespace bench
