// Naive Nadaraya–Watson kernel regression in double: the ground truth of the kernel-regression
// tests.
#pragma once

#include <vector>

#include "attention/attention.h"

// out[b, i] = Σ_j f(u_ij) v[b, j] / Σ_j f(u_ij), u_ij = ‖q[b, i] − k[b, j]‖ / bandwidth, with f as
// documented at attention::RegressionKernel; views rank 3 ([B, S, D]) read through their strides.
// out is resized to the dense [B, Sq, Dv], log_weight_sum (may be null) to [B, Sq]: log Σ_j f.
// A row whose weights are all 0 gives zeros and -inf. The Gaussian is summed relative to the row's
// smallest distance, so it never underflows to 0/0.
void reference_nadaraya_watson(const attention::TensorView& q, const attention::TensorView& k,
                               const attention::TensorView& v, attention::RegressionKernel kernel,
                               double bandwidth, std::vector<double>* out,
                               std::vector<double>* log_weight_sum);
