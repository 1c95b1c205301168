// Heap allocations per call in steady state: after warm-up calls of the same shape, a call must
// not reach the C heap (glibc's malloc family, which operator new and Halide's default allocator
// use too). This executable replaces malloc, calloc, realloc and the aligned allocators with
// counting wrappers around glibc's own (its own binary: the counting covers every thread of the
// process, Halide's thread pool included), and is not built with the sanitizers, which replace
// the allocator themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* p);
}

namespace {
std::atomic<bool> counting{false};
std::atomic<int64_t> allocations{0};
void count() {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(size_t size) {
  count();
  return __libc_malloc(size);
}
void* calloc(size_t n, size_t size) {
  count();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t size) {
  count();
  return __libc_realloc(p, size);
}
void* memalign(size_t alignment, size_t size) {
  count();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(size_t alignment, size_t size) {
  count();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, size_t alignment, size_t size) {
  count();
  *out = __libc_memalign(alignment, size);
  return *out == nullptr ? 12 /* ENOMEM */ : 0;
}
void free(void* p) { __libc_free(p); }
}

namespace attention_test {
namespace {

using attention::DType;
using attention::TensorView;

// The heap allocations while `run` runs.
int64_t allocations_during(const std::function<void()>& run) {
  allocations = 0;
  counting = true;
  run();
  counting = false;
  return allocations.load();
}

// The fewest heap allocations of one call of `call` (which must succeed) over 6 calls, after 3
// warm-up calls. Which worker of Halide's thread pool runs which work item varies between calls
// (more so while other processes share the cores), and a thread's first item of a kind fills its
// scratch cache: so some call may allocate. A call that reaches the heap on every run
// allocates per call.
int64_t allocations_in_steady_state(const std::function<attention::Status()>& call) {
  for (int warm = 0; warm < 3; ++warm) {
    const attention::Status status = call();
    EXPECT_TRUE(status.ok()) << status.message();
  }
  int64_t fewest = INT64_MAX;
  for (int run = 0; run < 6; ++run) {
    attention::Status status = attention::Status::ok_status();
    fewest = std::min(fewest, allocations_during([&] { status = call(); }));
    EXPECT_TRUE(status.ok()) << status.message();
  }
  return fewest;
}

// Where the checks below store what they allocate, so the compiler cannot elide the allocation.
void* volatile escaped = nullptr;

// The counter sees what operator new, malloc and the aligned allocators do (else every other
// test here passes whatever the runtime does).
TEST(Allocations, TheCounterSeesTheHeap) {
  EXPECT_EQ(allocations_during([] {
              auto* v = new std::vector<int>(1000);
              escaped = v;
              delete v;
            }),
            2);
  EXPECT_EQ(allocations_during([] {
              escaped = malloc(64);
              free(escaped);
            }),
            1);
  EXPECT_EQ(allocations_during([] {
              void* p = nullptr;
              if (posix_memalign(&p, 64, 256) == 0) escaped = p;
              free(escaped);
            }),
            1);
  EXPECT_EQ(allocations_during([] {}), 0);
}

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> data(static_cast<size_t>(n));
  for (float& x : data) x = value(rng);
  return data;
}

// The lengths a masked case points its options to (B <= 4).
int32_t key_lengths[4] = {131, 77, 1, 130};

struct SdpaCase {
  const char* name;
  int64_t B, H, Hkv, Sq, Sk, D;
  bool logsumexp;
  std::function<void(attention::MaskOptions&)> mask;
};

TEST(Allocations, SdpaCallsInSteadyStateAllocateNothing) {
  using attention::Causal;
  const auto none = [](attention::MaskOptions&) {};
  const std::vector<SdpaCase> cases = {
      {"prefill 1x8x256x256x64", 1, 8, 8, 256, 256, 64, false, none},
      {"prefill with logsumexp", 1, 8, 8, 256, 256, 64, true, none},
      {"causal prefill 1x4x97x131x64", 1, 4, 4, 97, 131, 64, false,
       [](attention::MaskOptions& m) { m.causal = Causal::BottomRight; }},
      {"key lengths (a key cut) 4x2x37x131x64", 4, 2, 2, 37, 131, 64, false,
       [](attention::MaskOptions& m) {
         m.causal = Causal::TopLeft;
         m.key_lengths = TensorView::contiguous(key_lengths, attention::DType::Int32, {4});
       }},
      {"window (a key cut) and ALiBi 1x4x64x300x64", 1, 4, 4, 64, 300, 64, false,
       [](attention::MaskOptions& m) {
         m.causal = Causal::BottomRight;
         m.window = 50;
         m.alibi = true;
       }},
      {"decode 1x32(8)x1x4096x128", 1, 32, 8, 1, 4096, 128, false, none},
      {"decode 4x8x1x513x64", 4, 8, 8, 1, 513, 64, false, none},
      {"causal decode with softcap 2x8(2)x1x700x64", 2, 8, 2, 1, 700, 64, false,
       [](attention::MaskOptions& m) {
         m.causal = Causal::BottomRight;
         m.softcap = 30.0f;
       }},
      {"gqa rows 1x8(2)x5x300x64", 1, 8, 2, 5, 300, 64, false, none},
  };
  for (const SdpaCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<float> q = random_floats(c.B * c.H * c.Sq * c.D, 1),
                       k = random_floats(c.B * c.Hkv * c.Sk * c.D, 2),
                       v = random_floats(c.B * c.Hkv * c.Sk * c.D, 3),
                       out(static_cast<size_t>(c.B * c.H * c.Sq * c.D)),
                       lse(static_cast<size_t>(c.B * c.H * c.Sq));
    attention::SdpaOptions options;
    c.mask(options.mask);
    if (c.logsumexp) options.logsumexp = TensorView::contiguous(lse.data(), {c.B, c.H, c.Sq});
    const TensorView tq = TensorView::contiguous(q.data(), {c.B, c.H, c.Sq, c.D}),
                     tk = TensorView::contiguous(k.data(), {c.B, c.Hkv, c.Sk, c.D}),
                     tv = TensorView::contiguous(v.data(), {c.B, c.Hkv, c.Sk, c.D}),
                     tout = TensorView::contiguous(out.data(), {c.B, c.H, c.Sq, c.D});
    std::string plan;
    ASSERT_TRUE(attention::explain_sdpa(tq, tk, tv, tout, options, &plan).ok());
    int64_t calls = 0;
    EXPECT_EQ(allocations_in_steady_state([&] {
                // The last call writes every output element (poisoned before it).
                if (++calls == 9) std::fill(out.begin(), out.end(), std::nanf(""));
                return attention::scaled_dot_product_attention(tq, tk, tv, tout, options);
              }),
              0)
        << plan;
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }))
        << plan;
  }
}

// Paged decode over a vLLM-layout pool: 3 sequences of different lengths in shuffled blocks (two
// length groups, each its own kernel call).
TEST(Allocations, PagedDecodeInSteadyStateAllocatesNothing) {
  const int64_t B = 3, H = 8, Hkv = 2, D = 64, block = 16, width = 20, blocks = B * width;
  std::vector<float> q = random_floats(B * H * D, 4), out(static_cast<size_t>(B * H * D)),
                     k = random_floats(blocks * block * Hkv * D, 5),
                     v = random_floats(blocks * block * Hkv * D, 6);
  std::vector<int32_t> table(static_cast<size_t>(B * width)), lengths = {300, 17, 1};
  for (size_t n = 0; n < table.size(); ++n) table[n] = static_cast<int32_t>((n * 7) % blocks);
  attention::PagedKvCache cache;
  cache.k = TensorView::contiguous(k.data(), {blocks, block, Hkv, D});
  cache.v = TensorView::contiguous(v.data(), {blocks, block, Hkv, D});
  cache.block_table = TensorView::contiguous(table.data(), attention::DType::Int32, {B, width});
  cache.seq_lens = TensorView::contiguous(lengths.data(), attention::DType::Int32, {B});
  const TensorView tq = TensorView::contiguous(q.data(), {B, H, 1, D}),
                   tout = TensorView::contiguous(out.data(), {B, H, 1, D});
  attention::SdpaOptions options;
  options.mask.causal = attention::Causal::BottomRight;
  int64_t calls = 0;
  std::string plan;
  ASSERT_TRUE(attention::explain_paged(tq, cache, tout, options, &plan).ok());
  EXPECT_EQ(allocations_in_steady_state([&] {
              if (++calls == 9) std::fill(out.begin(), out.end(), std::nanf(""));
              return attention::paged_attention(tq, cache, tout, options);
            }),
            0)
      << plan;
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }))
      << plan;
}

// The MHA block (packed weights, self-attention, causal) and a Float16 SDPA call (widened into
// fp32 scratch).
TEST(Allocations, MhaAndHalfCallsInSteadyStateAllocateNothing) {
  const int64_t B = 2, S = 37, E = 64, heads = 4;
  std::vector<float> x = random_floats(B * S * E, 7), w_in = random_floats(3 * E * E, 8),
                     b_in = random_floats(3 * E, 9), w_out = random_floats(E * E, 10),
                     b_out = random_floats(E, 11), out(static_cast<size_t>(B * S * E));
  attention::MhaWeights weights;
  weights.in_proj_weight = TensorView::contiguous(w_in.data(), {3 * E, E});
  weights.in_proj_bias = TensorView::contiguous(b_in.data(), {3 * E});
  weights.out_proj_weight = TensorView::contiguous(w_out.data(), {E, E});
  weights.out_proj_bias = TensorView::contiguous(b_out.data(), {E});
  const TensorView tx = TensorView::contiguous(x.data(), {B, S, E}),
                   tout = TensorView::contiguous(out.data(), {B, S, E});
  attention::MhaOptions options;
  options.num_heads = heads;
  options.mask.causal = attention::Causal::TopLeft;
  int64_t calls = 0;
  EXPECT_EQ(allocations_in_steady_state([&] {
              if (++calls == 9) std::fill(out.begin(), out.end(), std::nanf(""));
              return attention::multi_head_attention(tx, tx, weights, tout, options);
            }),
            0);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return std::isfinite(v); }));

  // Float16 q, k, v and out, 1x4x61x67x64: the half route's fp32 copies and rounding.
  const int64_t H = 4, Sq = 61, Sk = 67, D = 64;
  std::vector<uint16_t> q16(static_cast<size_t>(H * Sq * D), 0x3c00),  // 1.0
      k16(static_cast<size_t>(H * Sk * D), 0x3800),                    // 0.5
      v16(static_cast<size_t>(H * Sk * D), 0x3c00), out16(static_cast<size_t>(H * Sq * D));
  const auto half = [](std::vector<uint16_t>& data, int64_t rows) {
    return TensorView::contiguous(data.data(), attention::DType::Float16, {1, 4, rows, 64});
  };
  calls = 0;
  EXPECT_EQ(allocations_in_steady_state([&] {
              if (++calls == 9) std::fill(out16.begin(), out16.end(), uint16_t{0x7e00});  // NaN
              return attention::scaled_dot_product_attention(half(q16, Sq), half(k16, Sk),
                                                             half(v16, Sk), half(out16, Sq));
            }),
            0);
  // Every value row is all ones, so every output is 1.0.
  EXPECT_TRUE(std::all_of(out16.begin(), out16.end(), [](uint16_t h) { return h == 0x3c00; }));

  // BFloat16 prefill, 1x4x61x67x64 unmasked and causal: the AMX kernel's packed k and v where the
  // CPU has AMX, the vdpbf16ps kernel or the widening route elsewhere.
  std::vector<uint16_t> qb(static_cast<size_t>(H * Sq * D), 0x3f80),  // 1.0
      kb(static_cast<size_t>(H * Sk * D), 0x3f00),                    // 0.5
      vb(static_cast<size_t>(H * Sk * D), 0x3f80), outb(static_cast<size_t>(H * Sq * D));
  const auto bf16 = [](std::vector<uint16_t>& data, int64_t rows) {
    return TensorView::contiguous(data.data(), attention::DType::BFloat16, {1, 4, rows, 64});
  };
  for (const attention::Causal causal : {attention::Causal::None, attention::Causal::TopLeft}) {
    attention::SdpaOptions options;
    options.mask.causal = causal;
    calls = 0;
    EXPECT_EQ(allocations_in_steady_state([&] {
                if (++calls == 9) std::fill(outb.begin(), outb.end(), uint16_t{0x7fc0});  // NaN
                return attention::scaled_dot_product_attention(
                    bf16(qb, Sq), bf16(kb, Sk), bf16(vb, Sk), bf16(outb, Sq), options);
              }),
              0);
    EXPECT_TRUE(std::all_of(outb.begin(), outb.end(), [](uint16_t h) { return h == 0x3f80; }));
  }
}

}  // namespace
}  // namespace attention_test
