// The autoscheduler "GuardedTails": runs the Halide autoscheduler named by its parameter
// `autoscheduler.inner` (Mullapudi2016, Li2018 or Adams2019, its plugin loaded with -p as usual;
// every other autoscheduler.* parameter goes to it), then gives every split of a pure variable a
// guarded tail (TailStrategy::GuardWithIf).
//
// Why: the autoschedulers pick split and vector factors from the estimates (D = 64, Sq = 1024,
// 8 heads) with tails that shift inwards or round up, which need the extent to be at least the
// factor. A call with D = 8, Sq = 3 or H = 1 is then refused by Halide's bounds check ("Output
// buffer out is accessed at -8, which is before the min (0)"), and a rounded-up producer reads its
// inputs past their end. A guarded tail is legal for every split and keeps the loop nest, factors,
// vector widths and compute levels the autoscheduler chose: whole tiles run the same code, only the
// last partial tile of each loop is predicated.
#include <map>
#include <string>
#include <vector>

#include "Halide.h"

namespace {

using namespace Halide;

void guard_tails(Internal::Definition definition) {  // a handle: edits the shared schedule
  for (Internal::Split& split : definition.schedule().splits()) {
    if (split.split_type != Internal::Split::SplitVar) continue;
    switch (split.tail) {
      case TailStrategy::Auto:
      case TailStrategy::RoundUp:
      case TailStrategy::ShiftInwards:
      case TailStrategy::RoundUpAndBlend:
      case TailStrategy::ShiftInwardsAndBlend:
        split.tail = TailStrategy::GuardWithIf;
        break;
      default:  // GuardWithIf and the Predicate* strategies never leave the extent
        break;
    }
  }
}

void guarded_tails(const Pipeline& pipeline, const Target& target,
                   const AutoschedulerParams& params, AutoSchedulerResults* results) {
  AutoschedulerParams inner;
  for (const auto& [key, value] : params.extra) {
    if (key == "inner") {
      inner.name = value;
    } else {
      inner.extra[key] = value;
    }
  }
  _halide_user_assert(!inner.name.empty() && inner.name != "GuardedTails")
      << "autoscheduler=GuardedTails needs autoscheduler.inner=<Mullapudi2016|Li2018|Adams2019>";
  Pipeline scheduled = pipeline;
  *results = scheduled.apply_autoscheduler(target, inner);

  std::vector<Internal::Function> outputs;
  for (const Func& f : pipeline.outputs()) outputs.push_back(f.function());
  for (auto& [name, function] : Internal::build_environment(outputs)) {
    guard_tails(function.definition());
    for (const Internal::Definition& update : function.updates()) guard_tails(update);
  }
  results->autoscheduler_params = params;
  results->schedule_source = "// " + inner.name +
                             "'s schedule, every split of a pure variable with "
                             "TailStrategy::GuardWithIf (GuardedTails)\n" +
                             results->schedule_source;
}

// Registered when the generator executable starts, beside the plugins it loads with -p.
const bool registered = [] {
  Pipeline::add_autoscheduler("GuardedTails", guarded_tails);
  return true;
}();

}  // namespace
