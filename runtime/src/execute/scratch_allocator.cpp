// Every work item of a kernel allocates its tile of scores (hundreds of KiB). glibc serves blocks
// that large with fresh mmap'd pages, so each tile paid page faults and an munmap: measured at
// 1x8x2048x2048 x64 that halved the kernel's speed (59 vs 120 GFLOP/s). Keeping a few freed blocks
// per thread for reuse removes that cost; the cache is bounded, and released when the thread exits.
#include "execute/scratch_allocator.h"

#include <HalideRuntime.h>

#include <cstddef>

namespace attention::detail {
namespace {

// Halide wants 64-byte alignment on x86 and a size that is a multiple of it.
constexpr size_t kAlignment = 64;
// A header in front of each block remembers its capacity (Halide's free passes only the pointer).
constexpr size_t kHeader = kAlignment;
// A work item holds up to six buffers at once, a half-precision call four fp32 copies of its
// tensors, and a route's parts their own: small blocks are kept too, so a call in steady state
// reaches the heap not at all (tests/allocation_test.cpp).
constexpr int kMaxCachedBlocks = 32;
constexpr size_t kMinCachedBytes = 0;
constexpr size_t kMaxCachedBytes = size_t(64) << 20;

struct Block {
  void* user = nullptr;  // the pointer handed to Halide
  size_t capacity = 0;
};

size_t& capacity_of(void* user) {
  return *reinterpret_cast<size_t*>(static_cast<char*>(user) - kHeader);
}

// The allocator installed before ours (an application's, or Halide's default): the memory itself
// always comes from it, so an application that routes Halide's allocations still sees them all.
halide_malloc_t underlying_malloc = halide_default_malloc;
halide_free_t underlying_free = halide_default_free;

void release(void* user) { underlying_free(nullptr, static_cast<char*>(user) - kHeader); }

class ThreadCache {
 public:
  ~ThreadCache() {
    for (int n = 0; n < count_; ++n) release(blocks_[n].user);
  }

  // The smallest cached block that fits without wasting more than half of it, if any.
  void* take(size_t size) {
    int best = -1;
    for (int n = 0; n < count_; ++n) {
      const size_t capacity = blocks_[n].capacity;
      if (capacity >= size && capacity / 2 <= size &&
          (best < 0 || capacity < blocks_[best].capacity)) {
        best = n;
      }
    }
    if (best < 0) return nullptr;
    void* user = blocks_[best].user;
    remove(best);
    return user;
  }

  // Keeps a freed block, releasing the oldest kept ones if it would not fit otherwise: calls of a
  // new shape replace the blocks of the last one instead of being turned away (a benchmark that
  // alternates shapes saw the half-precision scratch of 8 MiB tensors mapped afresh every call).
  bool keep(void* user) {
    const size_t capacity = capacity_of(user);
    if (capacity < kMinCachedBytes || capacity > kMaxCachedBytes) return false;
    while (count_ == kMaxCachedBlocks || bytes_ + capacity > kMaxCachedBytes) {
      void* oldest = blocks_[0].user;
      remove(0);
      release(oldest);
    }
    blocks_[count_++] = Block{user, capacity};
    bytes_ += capacity;
    return true;
  }

 private:
  // Removes block n, keeping the others oldest first.
  void remove(int n) {
    bytes_ -= blocks_[n].capacity;
    for (int m = n + 1; m < count_; ++m) blocks_[m - 1] = blocks_[m];
    --count_;
  }

  Block blocks_[kMaxCachedBlocks];  // oldest first
  int count_ = 0;
  size_t bytes_ = 0;
};

thread_local ThreadCache cache;

void* scratch_malloc(void* user_context, size_t size) {
  size = (size + kAlignment - 1) / kAlignment * kAlignment;
  if (void* reused = cache.take(size)) return reused;
  auto* base = static_cast<char*>(underlying_malloc(user_context, size + kHeader));
  if (base == nullptr) return nullptr;
  void* user = base + kHeader;
  capacity_of(user) = size;
  return user;
}

void scratch_free(void* /*user_context*/, void* user) {
  if (user != nullptr && !cache.keep(user)) release(user);
}

}  // namespace

void install_scratch_allocator() {
  const halide_malloc_t previous_malloc = halide_set_custom_malloc(scratch_malloc);
  const halide_free_t previous_free = halide_set_custom_free(scratch_free);
  if (previous_malloc != nullptr && previous_free != nullptr) {
    underlying_malloc = previous_malloc;
    underlying_free = previous_free;
  }
}

}  // namespace attention::detail
