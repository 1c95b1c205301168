// nadaraya_watson_attention: argument checks, then the kernel_regression kernels (the SDPA
// pipeline with a distance score; see generators/sdpa_generator.cpp) on [B, 1, S, D] views.
#include <cmath>
#include <string>

#include "attention/attention.h"
#include "call/tensor_util.h"
#include "call/validate.h"
#include "execute/half_precision.h"
#include "kernels/halide_view.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_table.h"

namespace attention {
namespace {

Status check_args(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out, const KernelRegressionOptions& options) {
  ATTENTION_RETURN_IF_ERROR(detail::check_view(q, "queries", 3, "[B, Sq, D]"));
  ATTENTION_RETURN_IF_ERROR(detail::check_view(k, "keys", 3, "[B, Sk, D]"));
  ATTENTION_RETURN_IF_ERROR(detail::check_view(v, "values", 3, "[B, Sk, Dv]"));
  ATTENTION_RETURN_IF_ERROR(detail::check_view(out, "out", 3, "[B, Sq, Dv]"));
  const int64_t B = q.shape[0], Sq = q.shape[1], D = q.shape[2];
  const int64_t Sk = k.shape[1], Dv = v.shape[2];
  if (D == 0) {
    return Status::invalid("queries: dim D must be >= 1, got shape " + detail::shape_string(q));
  }
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(k, "keys", {{"B", B}, {"Sk", -1}, {"D", D}}));
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(v, "values", {{"B", B}, {"Sk", Sk}, {"Dv", -1}}));
  if (Dv == 0) {
    return Status::invalid("values: dim Dv must be >= 1, got shape " + detail::shape_string(v));
  }
  ATTENTION_RETURN_IF_ERROR(detail::check_shape(out, "out", {{"B", B}, {"Sq", Sq}, {"Dv", Dv}}));
  const int kernel = static_cast<int>(options.kernel);
  if (kernel < 0 || kernel > 2) {
    return Status::invalid(
        "options.kernel: not a RegressionKernel (Gaussian, Boxcar or "
        "Epanechnikov), got " +
        std::to_string(kernel));
  }
  const float h = options.bandwidth;
  if (!(h > 0.0f) || !std::isfinite(h) || !std::isfinite(1.0f / (h * h))) {
    return Status::invalid(
        "options.bandwidth: must be finite and > 0 with 1/bandwidth² finite in fp32, got " +
        std::to_string(h));
  }
  detail::NamedViews inputs = {{&q, "queries"}, {&k, "keys"}, {&v, "values"}};
  ATTENTION_RETURN_IF_ERROR(detail::check_output_memory(out, "out", inputs));
  inputs.insert(inputs.begin(), {&out, "out"});
  return detail::check_optional_output(options.log_weight_sum, "options.log_weight_sum", "[B, Sq]",
                                       {{"B", B}, {"Sq", Sq}}, inputs);
}

}  // namespace

Status nadaraya_watson_attention(const TensorView& queries, const TensorView& keys,
                                 const TensorView& values, const TensorView& out,
                                 const KernelRegressionOptions& options) {
  ATTENTION_RETURN_IF_ERROR(check_args(queries, keys, values, out, options));
  if (out.numel() == 0) return Status::ok_status();  // B or Sq is 0
  const int64_t B = queries.shape[0], Sq = queries.shape[1], Sk = keys.shape[1];
  if (Sk == 0) {  // no keys: every row has no weight at all
    detail::write_rows_without_keys(out, options.log_weight_sum);
    return Status::ok_status();
  }
  detail::ScratchFloats lws_scratch;
  TensorView lws;
  ATTENTION_RETURN_IF_ERROR(
      detail::stats_or_scratch(options.log_weight_sum, {B, Sq}, lws_scratch, &lws));
  const float inverse_bandwidth_squared = 1.0f / (options.bandwidth * options.bandwidth);
  const auto kernel = static_cast<int32_t>(options.kernel);
  // Keys farther than the bandwidth get weight 0; a NaN/Inf value there must not reach the row.
  const bool values_finite = detail::all_finite(values);
  detail::HalideView hq(detail::with_one_head(queries)), hk(detail::with_one_head(keys)),
      hv(detail::with_one_head(values)), hout(detail::with_one_head(out)),
      hlws(detail::with_one_head(lws), detail::RowStats{out.shape[2]});
  const auto& row = detail::nadaraya_watson_row();
  const detail::KernelChoice choice =
      detail::choose_kernel(row.prefill.name, row.decode.name, B, 1, Sq, Sk);
  const auto& fn = row[choice];
  return detail::run_kernel(fn.name, fn.fn, hq.get(), hk.get(), hv.get(), inverse_bandwidth_squared,
                            kernel, values_finite, choice.key_split, hout.get(), hlws.get());
}

}  // namespace attention
