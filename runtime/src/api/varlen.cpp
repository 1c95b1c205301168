// scaled_dot_product_attention_varlen: a packed batch of sequences run as one SDPA call per
// sequence, on views of the packed tensors (no copies, no padding).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "call/mask_args.h"
#include "call/rope_args.h"
#include "call/sdpa_call.h"
#include "call/tensor_util.h"
#include "call/validate.h"
#include "execute/gpu.h"

namespace attention {
namespace {

// A packed [T, H, X] view as the [1, H, T, X] of one SDPA batch (the batch stride is never used).
TensorView as_one_batch(const TensorView& t) {
  TensorView view = t;
  view.rank = 4;
  view.shape = {1, t.shape[1], t.shape[0], t.shape[2]};
  // The batch stride is any value (one index); this one keeps the view's span honest.
  view.strides = {t.strides[0] * std::max<int64_t>(t.shape[0], 1), t.strides[1], t.strides[0],
                  t.strides[2]};
  return view;
}

// The [H, Tq] logsumexp as the [1, H, Tq] of one SDPA batch.
TensorView lse_as_one_batch(const TensorView& t) {
  TensorView view = t;
  view.rank = 3;
  view.shape = {1, t.shape[0], t.shape[1], 0};
  view.strides = {t.strides[0] * std::max<int64_t>(t.shape[0], 1), t.strides[0], t.strides[1], 0};
  return view;
}

// cu_seqlens (Int32 [B + 1], host): starts at 0, never decreases, ends at `total` (the packed
// tensors' token count, named by `total_name`). Copies the offsets into `offsets`.
Status read_cu_seqlens(const TensorView& t, const char* name, int64_t total, const char* total_name,
                       std::vector<int64_t>* offsets) {
  ATTENTION_RETURN_IF_ERROR(detail::check_view(t, name, 1, "[B + 1]", DType::Int32,
                                               /*any_strides=*/true));
  if (t.shape[0] < 1) {
    return Status::invalid(std::string(name) + ": expected shape [B + 1] with B + 1 >= 1, got " +
                           detail::shape_string(t));
  }
  const auto* data = static_cast<const int32_t*>(t.data);
  offsets->resize(t.shape[0]);
  for (int64_t i = 0; i < t.shape[0]; ++i) (*offsets)[i] = data[i * t.strides[0]];
  const std::vector<int64_t>& cu = *offsets;
  if (cu[0] != 0) {
    return Status::invalid(std::string(name) + "[0] must be 0, got " + std::to_string(cu[0]));
  }
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) {
      return Status::invalid(std::string(name) + "[" + std::to_string(i) + "] = " +
                             std::to_string(cu[i]) + " is less than " + name + "[" +
                             std::to_string(i - 1) + "] = " + std::to_string(cu[i - 1]) +
                             " (sequence " + std::to_string(i - 1) + " would have negative length)");
    }
  }
  if (cu.back() != total) {
    return Status::invalid(std::string(name) + "[B] = " + std::to_string(cu.back()) +
                           " must equal " + total_name + " = " + std::to_string(total));
  }
  return Status::ok_status();
}

// mask.key_lengths / query_lengths, when given: Int32 [B], each within its sequence's length.
Status check_lengths(const TensorView& t, const char* name, const std::vector<int64_t>& cu,
                     const char* length_name) {
  if (!detail::given(t)) return Status::ok_status();
  const int64_t B = static_cast<int64_t>(cu.size()) - 1;
  ATTENTION_RETURN_IF_ERROR(detail::check_view(t, name, 1, "[B]", DType::Int32, true));
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(t, name, {{"B", B}}));
  const auto* data = static_cast<const int32_t*>(t.data);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t value = data[b * t.strides[0]], length = cu[b + 1] - cu[b];
    if (value < 0 || value > length) {
      return Status::invalid(std::string(name) + "[" + std::to_string(b) + "] = " +
                             std::to_string(value) + " is outside [0, " + length_name + "=" +
                             std::to_string(length) + "] of sequence " + std::to_string(b));
    }
  }
  return Status::ok_status();
}

// The SDPA call of sequence b: views of its rows, its own lengths.
struct SequenceCall {
  TensorView q, k, v, out;
  SdpaOptions options;
};

}  // namespace

Status scaled_dot_product_attention_varlen(const TensorView& q, const TensorView& k,
                                           const TensorView& v, const TensorView& out,
                                           const TensorView& cu_seqlens_q,
                                           const TensorView& cu_seqlens_k,
                                           const SdpaOptions& options) {
  const MaskOptions& m = options.mask;
  // The packed tensors themselves; each sequence's call checks the rest (dtypes, D, GQA, masks).
  detail::Run run = detail::Run::CPU;
  const detail::NamedViews tensors = {
      {&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&options.logsumexp, "logsumexp"}};
  ATTENTION_RETURN_IF_ERROR(detail::resolve_backend(options.backend, tensors, &run));
  ATTENTION_RETURN_IF_ERROR(detail::check_cuda_stream(options.gpu, "gpu", run));
  const Device device = detail::device_of(tensors);
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(q, "q", 3, "[Tq, H, D]", device));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(k, "k", 3, "[Tk, Hkv, D]", device));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(v, "v", 3, "[Tk, Hkv, Dv]", device));
  ATTENTION_RETURN_IF_ERROR(detail::check_float_view(out, "out", 3, "[Tq, H, Dv]", device));
  const int64_t Tq = q.shape[0], H = q.shape[1], Tk = k.shape[0], Dv = v.shape[2];
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(k, "k", {{"Tk", -1}, {"Hkv", -1}, {"D", q.shape[2]}}));
  ATTENTION_RETURN_IF_ERROR(
      detail::check_shape(v, "v", {{"Tk", Tk}, {"Hkv", k.shape[1]}, {"Dv", -1}}));
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(out, "out", {{"Tq", Tq}, {"H", H}, {"Dv", Dv}}));
  std::vector<int64_t> cu_q, cu_k;
  ATTENTION_RETURN_IF_ERROR(read_cu_seqlens(cu_seqlens_q, "cu_seqlens_q", Tq, "Tq", &cu_q));
  ATTENTION_RETURN_IF_ERROR(read_cu_seqlens(cu_seqlens_k, "cu_seqlens_k", Tk, "Tk", &cu_k));
  if (cu_q.size() != cu_k.size()) {
    return Status::invalid("cu_seqlens_k: expected shape [B + 1] = [" +
                           std::to_string(cu_q.size()) + "] as cu_seqlens_q, got " +
                           detail::shape_string(cu_seqlens_k));
  }
  ATTENTION_RETURN_IF_ERROR(detail::refuse_mask_tensors(
      m, "mask tensors have no packed form; pass per-sequence calls of "
         "scaled_dot_product_attention, or key_lengths/query_lengths"));
  ATTENTION_RETURN_IF_ERROR(check_lengths(m.key_lengths, "mask.key_lengths", cu_k, "Sk"));
  ATTENTION_RETURN_IF_ERROR(check_lengths(m.query_lengths, "mask.query_lengths", cu_q, "Sq"));
  if (options.rope) {
    // The options and the offsets' [B] shape here (each sequence takes its own offset); every
    // sequence's positions in its own call's check.
    detail::RopeArgs rope;
    ATTENTION_RETURN_IF_ERROR(detail::check_rope(*options.rope,
                                                 static_cast<int64_t>(cu_q.size()) - 1, q.shape[2],
                                                 /*first=*/0, /*last=*/-1, "rope.", &rope));
  }
  const bool lse_given = options.logsumexp.data != nullptr;
  detail::NamedViews inputs = {{&q, "q"}, {&k, "k"}, {&v, "v"}};
  ATTENTION_RETURN_IF_ERROR(detail::check_output_memory(out, "out", inputs));
  if (lse_given) {
    inputs.insert(inputs.begin(), {&out, "out"});
    ATTENTION_RETURN_IF_ERROR(detail::check_optional_output(
        options.logsumexp, "logsumexp", "[H, Tq]", {{"H", H}, {"Tq", Tq}}, inputs, device));
  }

  // Every sequence's call, checked before the first runs.
  const TensorView q4 = as_one_batch(q), k4 = as_one_batch(k), v4 = as_one_batch(v),
                   out4 = as_one_batch(out);
  const TensorView lse3 = lse_given ? lse_as_one_batch(options.logsumexp) : TensorView{};
  const int64_t B = static_cast<int64_t>(cu_q.size()) - 1;
  std::vector<SequenceCall> calls;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t Sq = cu_q[b + 1] - cu_q[b], Sk = cu_k[b + 1] - cu_k[b];
    if (Sq == 0) continue;  // nothing to compute or write
    SequenceCall& call = calls.emplace_back();
    call.q = detail::slice(q4, 2, cu_q[b], Sq);
    call.out = detail::slice(out4, 2, cu_q[b], Sq);
    call.k = detail::slice(k4, 2, cu_k[b], Sk);
    call.v = detail::slice(v4, 2, cu_k[b], Sk);
    call.options = options;
    call.options.logsumexp = lse_given ? detail::slice(lse3, 2, cu_q[b], Sq) : TensorView{};
    MaskOptions& mask = call.options.mask;
    if (detail::given(m.key_lengths)) mask.key_lengths = detail::slice(m.key_lengths, 0, b, 1);
    if (detail::given(m.query_lengths))
      mask.query_lengths = detail::slice(m.query_lengths, 0, b, 1);
    if (options.rope && detail::given(options.rope->position_offsets)) {
      call.options.rope->position_offsets = detail::slice(options.rope->position_offsets, 0, b, 1);
    }
    detail::Run sequence_run = run;
    const Status status =
        detail::check_sdpa_call(call.q, call.k, call.v, call.out, call.options, &sequence_run);
    if (!status.ok()) {
      return Status::error(status.code(), "sequence " + std::to_string(b) + " (Sq=" +
                                              std::to_string(Sq) + ", Sk=" + std::to_string(Sk) +
                                              "): " + status.message());
    }
  }
  for (const SequenceCall& call : calls) {
    ATTENTION_RETURN_IF_ERROR(
        detail::plan_and_execute_sdpa("scaled_dot_product_attention_varlen sequence", run, call.q,
                                      call.k, call.v, call.out, call.options));
  }
  return Status::ok_status();
}

}  // namespace attention
