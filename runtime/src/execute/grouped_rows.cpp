// GQA calls of a few query rows (speculative decoding's draft tokens, short prefill chunks) as one
// head's rows of each kv head: see run_grouped_query_rows in sdpa_call.h.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/attention.h"
#include "call/mask_args.h"
#include "call/sdpa_call.h"
#include "call/tensor_util.h"
#include "call/validate.h"
#include "execute/half_precision.h"
#include "kernels/kernel_choice.h"
#include "plan/thresholds.h"

namespace attention::detail {
namespace {

float* element(const TensorView& t, int64_t b, int64_t h, int64_t i) {
  return static_cast<float*>(t.data) + b * t.strides[0] + h * t.strides[1] + i * t.strides[2];
}

}  // namespace

void merge_parts(const TensorView& out1, const TensorView& lse1, const TensorView& out2,
                 const TensorView& lse2, const TensorView& out, const TensorView& lse) {
  const int64_t B = out.shape[0], H = out.shape[1], Sq = out.shape[2], Dv = out.shape[3];
  const double minus_inf = -std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const double l1 = *element(lse1, b, h, i), l2 = *element(lse2, b, h, i);
        const float* o1 = element(out1, b, h, i);
        const float* o2 = element(out2, b, h, i);
        float* o = element(out, b, h, i);
        double w1 = 1.0, w2 = 0.0, merged = l1;  // a part 2 without keys adds nothing
        if (l2 != minus_inf) {
          const double top = l1 > l2 ? l1 : l2;  // NaN in either: NaN weights below
          w1 = std::exp(l1 - top);
          w2 = std::exp(l2 - top);
          const double sum = w1 + w2;
          w1 /= sum;
          w2 /= sum;
          merged = top + std::log(sum);
        }
        for (int64_t e = 0; e < Dv; ++e) o[e] = static_cast<float>(w1 * o1[e] + w2 * o2[e]);
        if (lse.data != nullptr) *element(lse, b, h, i) = static_cast<float>(merged);
      }
}

Status padded_query_rows(const TensorView& q32, int64_t rows, ScratchFloats& storage,
                         TensorView* padded) {
  const int64_t Sq = q32.shape[2];
  ATTENTION_RETURN_IF_ERROR(
      allocate_fp32({q32.shape[0], q32.shape[1], rows, q32.shape[3]}, storage, padded));
  copy(q32, slice(*padded, 2, 0, Sq));
  for (int64_t i = Sq; i < rows; ++i) copy(slice(q32, 2, 0, 1), slice(*padded, 2, i, 1));
  return Status::ok_status();
}

bool grouped_rows_take(const TensorView& q, const TensorView& k, const TensorView& v,
                       const SdpaOptions& options, GroupedRows* plan) {
  const MaskOptions& m = options.mask;
  const int64_t H = q.shape[1], Sq = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], Sk = k.shape[2];
  const int64_t group = Hkv > 0 ? H / Hkv : 0;
  const bool bottom_right = m.causal == Causal::BottomRight;
  // Masks that treat every row of a head alike, bottom-right causal and its window aside (split
  // off below). ALiBi is measured from each row's own diagonal.
  const bool rows_alike = (m.causal == Causal::None || bottom_right) &&
                          (m.window < 0 || m.window >= Sq - 1) && !m.alibi &&
                          !given(m.query_lengths) && !given(m.bool_mask) && !given(m.additive_mask);
  // Keys before the window's reach from the last row (the plan has cut those no row sees).
  const int64_t head_keys = m.window >= 0 ? std::max<int64_t>(Sk - m.window, 0) : 0;
  // At D = 128, a kv head's rows (group·Sq) run as the decode kernels' row blocks where they fill
  // one of 4 or 8 rows (kDecodeRowBlockRows), padded with copies of each head's first row: a
  // decode call whose kv heads each have 4 or 8 query heads. Which calls (1x32(Hkv)xSqx4096x128
  // causal unless said, ms):
  // - without GQA, 3-4 rows of a head, and 5-8 from kWideRowsMinKeys (Sq = 8: 9.6-10.0 -> 4.8-5.4;
  //   at 64 keys they lost, 0.23 -> 0.26). 2 rows go so only from a sequence-major cache ([B, Sk,
  //   Hkv, D] in memory), which the decode kernel reads one row per position and the decode call
  //   reads through run_decode_as_paged (Sq = 2: 12.2-12.5 -> 5.0); over a heads-major cache the
  //   decode kernel takes them as fast (3.25 against 4.03);
  // - a pair sharing a kv head, 3-4 rows each, where the kernels run 8 rows as two row blocks
  //   (AVX-512: 1x32(16)x4 3.6-3.7 -> 2.9-3.0, 8x32(16)x4x64 1.25-1.31 -> 1.13-1.16; through the
  //   GQA blocks of keys, AVX2, they lost: 2.99-3.12 -> 3.45-3.47), or 2 rows each under
  //   bottom-right causal or from a sequence-major cache, from kPairRowsMinKeys (8x32(16)x2x128
  //   0.78-0.80 -> 0.82-0.83, x256 1.48-1.50 -> 1.27); their unmasked rows over a heads-major
  //   cache already run so (run_cpu_decode);
  // - a group of 4, 2 rows each, from a sequence-major cache and kPairRowsMinKeys (1x32(8)x2
  //   2.3-2.4 -> 1.7); over a heads-major cache the decode kernel's per-head causal rows stay
  //   (8x32(8)x2x256x128 0.96 against 1.24 as rows), its unmasked rows already run so.
  const auto sequence_major = [Hkv](const TensorView& t) {
    return Hkv >= 2 && t.strides[1] > 0 && t.strides[2] >= Hkv * t.strides[1];
  };
  const bool by_position = sequence_major(k) && sequence_major(v);
  const bool few_rows =
      group == 1 ? (Sq >= 3 && (Sq <= 4 || Sk >= kWideRowsMinKeys)) || (Sq == 2 && by_position)
      : Sq >= 3  ? attention_contract::two_row_blocks(cpu_kernel_info().decode)
                 : (by_position || (group == 2 && bottom_right)) && Sk >= kPairRowsMinKeys;
  const int64_t row_block_rows = row_block_rows_per_head(D, group, Sq);
  const bool decode_rows = row_block_rows > 0 && Sq >= 2 && few_rows;
  const int64_t R = decode_rows ? row_block_rows : Sq;  // rows per head the prefix runs
  if ((group < 2 && !decode_rows) ||
      (Sq <= attention_contract::kDecodeMaxQueries && !decode_rows) || Sq > kGroupedMaxQueries ||
      !rows_alike || options.rope || (bottom_right && Sk < kCausalKeysPerQuery * Sq) ||
      (head_keys > 0 &&
       Sk - head_keys < kWindowKeysPerQuery * (Sq >= kWindowManyRows ? 2 : 1) * Sq)) {
    return false;
  }
  *plan = GroupedRows{decode_rows, R, head_keys};
  return true;
}

Status run_grouped_query_rows(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const SdpaOptions& options,
                              const GroupedRows& plan) {
  const MaskOptions& m = options.mask;
  const int64_t B = q.shape[0], H = q.shape[1], Sq = q.shape[2];
  const int64_t Hkv = k.shape[1], Sk = k.shape[2], Dv = v.shape[3];
  const int64_t group = H / Hkv;
  const bool bottom_right = m.causal == Causal::BottomRight;
  const bool decode_rows = plan.decode_rows;
  const int64_t R = plan.rows_per_head, head_keys = plan.head_keys;
  HostFp32Scratch halves;
  TensorView q32, out32;
  ATTENTION_RETURN_IF_ERROR(halves.widen(q, &q32));
  ATTENTION_RETURN_IF_ERROR(halves.stage(out, &out32));

  // The rows of query head kv·group + g are rows [g·Sq, (g + 1)·Sq) of kv head kv: a dense
  // [B, H, Sq, X] tensor is that [B, Hkv, group·Sq, X] one.
  // As a decode call: the same memory as [B, H·R, 1, X], R query heads per kv head.
  const auto as_rows = [&](const TensorView& dense) {
    const std::array<int64_t, 3> rows = decode_rows ? std::array<int64_t, 3>{B, H * R, 1}
                                                    : std::array<int64_t, 3>{B, Hkv, group * Sq};
    return dense.rank == 4
               ? TensorView::contiguous(dense.data, DType::Float32,
                                        {rows[0], rows[1], rows[2], dense.shape[3]})
               : TensorView::contiguous(dense.data, DType::Float32, {rows[0], rows[1], rows[2]});
  };
  ScratchFloats q_storage, prefix_out_storage, prefix_lse_storage;
  TensorView q_rows, prefix_rows_out, prefix_rows_lse;
  ATTENTION_RETURN_IF_ERROR(padded_query_rows(q32, R, q_storage, &q_rows));
  ATTENTION_RETURN_IF_ERROR(allocate_fp32({B, H, R, Dv}, prefix_out_storage, &prefix_rows_out));
  ATTENTION_RETURN_IF_ERROR(allocate_fp32({B, H, R}, prefix_lse_storage, &prefix_rows_lse));
  // The call's rows of the prefix's results (the padding rows are dropped).
  const TensorView prefix_out = slice(prefix_rows_out, 2, 0, Sq),
                   prefix_lse = slice(prefix_rows_lse, 2, 0, Sq);

  // Bottom-right causal: row i sees keys j <= Sk - Sq + i, with a window also j >= Sk - Sq + i -
  // window. Every row sees the prefix [head_keys, Sk - Sq + 1); the tail's Sq - 1 keys are each
  // row's first i, bottom-right causal again for Sq rows against Sq - 1 keys; the head's keys
  // [0, head_keys) each row's from i + head_keys - Sq on, which is bottom-right with a window of 0
  // and a forward reach past them. Key lengths cut each part where they cut the whole.
  const int64_t prefix_end = bottom_right ? Sk - Sq + 1 : Sk;
  const auto part_options = [&](int64_t begin, int64_t end, BatchLengths& lengths,
                                const TensorView& lse) {
    SdpaOptions part = options;
    part.backend = Backend::CPU;
    part.mask = mask_over_keys(m, B, Sk, begin, end, lengths);
    part.logsumexp = lse;
    return part;
  };
  BatchLengths prefix_lengths;
  SdpaOptions prefix_options =
      part_options(head_keys, prefix_end, prefix_lengths, as_rows(prefix_rows_lse));
  prefix_options.mask.causal = Causal::None;  // the prefix is every row's
  prefix_options.mask.window = -1;
  prefix_options.mask.window_forward = 0;
  ATTENTION_RETURN_IF_ERROR(plan_and_execute_sdpa("grouped-rows part", Run::CPU, as_rows(q_rows),
                                                  slice(k, 2, head_keys, prefix_end - head_keys),
                                                  slice(v, 2, head_keys, prefix_end - head_keys),
                                                  as_rows(prefix_rows_out), prefix_options));
  if (prefix_end == Sk && head_keys == 0) {
    copy(prefix_out, out32);
    if (given(options.logsumexp)) copy(prefix_lse, options.logsumexp);
    return halves.finish(out32, out);
  }
  // Each per-head part merges into the running result (out32 and, when given, the call's
  // logsumexp; else scratch).
  ScratchFloats part_out_storage, part_lse_storage, lse_storage;
  TensorView part_out, part_lse, lse = options.logsumexp;
  ATTENTION_RETURN_IF_ERROR(allocate_fp32({B, H, Sq, Dv}, part_out_storage, &part_out));
  ATTENTION_RETURN_IF_ERROR(allocate_fp32({B, H, Sq}, part_lse_storage, &part_lse));
  if (!given(lse)) ATTENTION_RETURN_IF_ERROR(allocate_fp32({B, H, Sq}, lse_storage, &lse));
  copy(prefix_out, out32);
  copy(prefix_lse, lse);
  const auto merge_part = [&](int64_t begin, int64_t end, const MaskOptions& mask) -> Status {
    BatchLengths lengths;
    SdpaOptions part = part_options(begin, end, lengths, part_lse);
    part.mask.causal = Causal::BottomRight;
    part.mask.window = mask.window;
    part.mask.window_forward = mask.window_forward;
    ATTENTION_RETURN_IF_ERROR(
        plan_and_execute_sdpa("grouped-rows part", Run::CPU, q32, slice(k, 2, begin, end - begin),
                              slice(v, 2, begin, end - begin), part_out, part));
    merge_parts(out32, lse, part_out, part_lse, out32, lse);
    return Status::ok_status();
  };
  if (prefix_end < Sk) ATTENTION_RETURN_IF_ERROR(merge_part(prefix_end, Sk, m));
  if (head_keys > 0) {
    MaskOptions head;
    head.window = 0;
    head.window_forward = Sq;
    ATTENTION_RETURN_IF_ERROR(merge_part(0, head_keys, head));
  }
  return halves.finish(out32, out);
}

}  // namespace attention::detail
