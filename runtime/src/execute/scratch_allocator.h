// Halide's scratch allocations (each work item's score tile) served from a small per-thread cache.
#pragma once

namespace attention::detail {

// Installs the caching allocator as this runtime's halide_malloc/halide_free (call once).
void install_scratch_allocator();

}  // namespace attention::detail
