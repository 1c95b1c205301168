// Elementwise math used by the softmax and the score caps: a vectorizable exp2 and tanh, shared
// with user mods (attention/generator/math.h). No scheduling here.
#pragma once

#include "attention/generator/math.h"

namespace attention_gen {

using attention::math::exp2_nonpositive;
using attention::math::tanh_vectorizable;

}  // namespace attention_gen
