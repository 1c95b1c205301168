// The kernel table: for each kernel family and backend, a config row holding the generated
// functions that serve it (prefill/decode × plain/masked), each named. Entry points pick their
// function from a row; tests/kernel_contract_test.cpp checks every slot against the parameters the
// build generated its kernel with (kernel_slots.h).
#pragma once

#include "additive_f32_decode.h"
#include "additive_f32_prefill.h"
#include "gpu.h"
#include "kernel_contract.h"
#include "mha_f32.h"
#include "mha_f32_masked.h"
#include "nadaraya_watson_f32_decode.h"
#include "nadaraya_watson_f32_prefill.h"
#include "sdpa_f32_decode.h"
#include "sdpa_f32_masked_decode.h"
#include "sdpa_f32_masked_prefill.h"
#include "sdpa_f32_prefill.h"

namespace attention::detail {

template <typename Fn>
struct KernelSlot {
  Fn fn;
  const char* name;
};

// A family whose calls go to its prefill or decode variant by the shape (KernelChoice).
template <typename Fn>
struct TilingPair {
  KernelSlot<Fn> prefill, decode;
  const KernelSlot<Fn>& operator[](const attention_contract::KernelChoice& choice) const {
    return choice.prefill ? prefill : decode;
  }
};

// scaled_dot_product_attention: without masking code, and with every mask.
struct SdpaRow {
  TilingPair<decltype(&sdpa_f32_prefill)> plain;
  TilingPair<decltype(&sdpa_f32_masked_prefill)> masked;
};

// multi_head_attention's whole block (always the prefill tiling).
struct MhaRow {
  KernelSlot<decltype(&mha_f32)> plain;
  KernelSlot<decltype(&mha_f32_masked)> masked;
};

// `run` must be a backend this build has kernels for (resolve_backend checks).
const SdpaRow& sdpa_row(Run run);
const MhaRow& mha_row(Run run);
// CPU only.
const TilingPair<decltype(&additive_f32_prefill)>& additive_row();
const TilingPair<decltype(&nadaraya_watson_f32_prefill)>& nadaraya_watson_row();

}  // namespace attention::detail
