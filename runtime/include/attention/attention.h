// Public API of the attention kernel library.
//
// The kernels behind these entry points are generated ahead of time by Halide (see generators/) for
// several x86-64 instruction sets and picked at run time by the CPU's features. These headers never
// include Halide.h: they only need the C++ standard library. This one includes them all:
//   tensor.h   DType, Device, Backend, TensorView, Status, GpuOptions, DeviceOptions,
//              backend_available, convert_dtype, set_num_threads
//   sdpa.h     MaskOptions, RopeOptions, SdpaOptions, scaled_dot_product_attention, explain_sdpa,
//              and which kernels run (cpu_kernel_target, tuned kernels, kernel libraries, ...)
//   serving.h  scaled_dot_product_attention_varlen, paged_attention, explain_paged,
//              apply_rotary_embedding
//   mha.h      multi_head_attention (with projections)
//   forms.h    nadaraya_watson_attention, dot-product, bilinear, additive and static attention
// mod_attention.h (your own mods) and kernel_library.h (kernel libraries) are apart.
#pragma once

#include "attention/forms.h"
#include "attention/mha.h"
#include "attention/sdpa.h"
#include "attention/serving.h"
#include "attention/tensor.h"
