// paged_attention: new tokens against a paged KV cache, checked per sequence against the double
// reference on the sequence's keys gathered from the pool by the test, with shuffled and shared
// block ids, NaN in every pool row no sequence uses, both layouts, GQA and the masks. The
// PagedAttention suite runs once more on each GPU backend (ATTENTION_TEST_BACKEND,
// tests/CMakeLists.txt), every other call there in the smallest chunks the workspace allows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "kernels/kernel_choice.h"
#include "kernels/kernel_table.h"
#include "random_cases.h"
#include "reference/sdpa_reference.h"
#include "test_util.h"

namespace {

using attention::DType;
using attention::PagedKvLayout;
using attention::TensorView;
using attention_test::uniform;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct PagedCase {
  int64_t H = 1, Hkv = 1, Sq = 1, D = 8, Dv = 8, block_size = 16;
  std::vector<int64_t> seq_lens;
  PagedKvLayout layout = PagedKvLayout::BlocksSlotsHeads;
  bool share_prefix = false;  // sequences 0 and 1 share their first block (same ids)
  attention::Causal causal = attention::Causal::BottomRight;
  int64_t window = -1, window_forward = 0;
  bool query_lengths = false, alibi = false;
  float softcap = 0.0f;
  int64_t extra_columns = 1;  // table columns past the longest sequence's (filled with -1)
  DType cache_dtype = DType::Float32;
  bool logsumexp = true;  // false: logsumexp has its shape but no data (skipped)
};

std::string describe(const PagedCase& c) {
  std::string s = "H=" + std::to_string(c.H) + "(" + std::to_string(c.Hkv) +
                  ") Sq=" + std::to_string(c.Sq) + " D=" + std::to_string(c.D) +
                  " Dv=" + std::to_string(c.Dv) + " block=" + std::to_string(c.block_size) +
                  (c.layout == PagedKvLayout::BlocksSlotsHeads ? " [blocks, slots, heads]"
                                                               : " [blocks, heads, slots]") +
                  " seq_lens:";
  for (int64_t n : c.seq_lens) s += " " + std::to_string(n);
  if (c.causal == attention::Causal::BottomRight) s += " causal";
  if (c.window >= 0) s += " window " + std::to_string(c.window);
  if (c.window_forward > 0) s += " forward " + std::to_string(c.window_forward);
  if (c.query_lengths) s += " query lengths";
  if (c.alibi) s += " alibi";
  if (c.softcap > 0) s += " softcap";
  if (!c.logsumexp) s += " logsumexp without data";
  if (c.cache_dtype != DType::Float32)
    s += c.cache_dtype == DType::Float16 ? " Float16 cache" : " BFloat16 cache";
  return s;
}

// A paged cache filled for a case: each sequence's blocks drawn from a shuffled pool of ids.
class PagedRun {
 public:
  PagedRun(const PagedCase& c, uint64_t seed) : c_(c), rng_(seed) {
    B_ = static_cast<int64_t>(c.seq_lens.size());
    int64_t width = 0, needed = 0;
    for (int64_t n : c.seq_lens) {
      const int64_t blocks = (n + c.block_size - 1) / c.block_size;
      width = std::max(width, blocks);
      needed += blocks;
    }
    width_ = width + c.extra_columns;
    blocks_ = needed + 3;  // three blocks no sequence uses (NaN)
    std::vector<int32_t> ids(static_cast<size_t>(blocks_));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    table_.assign(static_cast<size_t>(B_ * width_), -1);
    size_t next = 0;
    for (int64_t b = 0; b < B_; ++b) {
      for (int64_t n = 0; n < (c.seq_lens[b] + c.block_size - 1) / c.block_size; ++n) {
        const bool shared = c.share_prefix && b == 1 && n == 0 && c.seq_lens[0] > 0;
        table_[b * width_ + n] = shared ? table_[0] : ids[next++];
      }
    }
    k_.assign(static_cast<size_t>(blocks_ * c.block_size * c.Hkv * c.D), kNaN);
    v_.assign(static_cast<size_t>(blocks_ * c.block_size * c.Hkv * c.Dv), kNaN);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f), positive(-0.5f, 1.5f);
    // Slots a sequence holds in each block: the rest of the pool stays NaN, as unwritten cache
    // rows may be (the CPU kernel reads keys past a sequence's end and must not let them in).
    std::vector<int64_t> used(static_cast<size_t>(blocks_), 0);
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t n = 0; n * c.block_size < c.seq_lens[b]; ++n) {
        const int32_t id = table_[b * width_ + n];
        used[id] = std::max(used[id], std::min(c.block_size, c.seq_lens[b] - n * c.block_size));
      }
    for (int64_t blk = 0; blk < blocks_; ++blk) {
      for (int64_t slot = 0; slot < used[blk]; ++slot)
        for (int64_t h = 0; h < c.Hkv; ++h) {
          for (int64_t d = 0; d < c.D; ++d) k_[offset(blk, slot, h, c.D) + d] = uniform(rng_);
          for (int64_t d = 0; d < c.Dv; ++d) v_[offset(blk, slot, h, c.Dv) + d] = positive(rng_);
        }
    }
    q_.resize(static_cast<size_t>(B_ * c.H * c.Sq * c.D));
    for (float& x : q_) x = uniform(rng_);
    for (int64_t n : c.seq_lens) seq_lens_.push_back(static_cast<int32_t>(n));
    std::uniform_int_distribution<int64_t> rows(0, c.Sq);
    for (int64_t b = 0; b < B_; ++b) query_lengths_.push_back(static_cast<int32_t>(rows(rng_)));
    out_.assign(static_cast<size_t>(B_ * c.H * c.Sq * c.Dv + 1), kNaN);
    lse_.assign(static_cast<size_t>(B_ * c.H * c.Sq + 1), kNaN);
    options_.mask.causal = c.causal;
    options_.mask.window = c.window;
    options_.mask.window_forward = c.window_forward;
    options_.mask.alibi = c.alibi;
    options_.mask.softcap = c.softcap;
    if (c.query_lengths)
      options_.mask.query_lengths =
          TensorView::contiguous(query_lengths_.data(), DType::Int32, {B_});
    options_.logsumexp =
        TensorView::contiguous(c.logsumexp ? lse_.data() : nullptr, {B_, c.H, c.Sq});
    options_.backend = attention_test::test_backend();
  }

  attention::PagedKvCache cache() {
    attention::PagedKvCache cache;
    const bool bsh = c_.layout == PagedKvLayout::BlocksSlotsHeads;
    const int64_t bs = c_.block_size, hkv = c_.Hkv;
    if (bsh) {
      cache.k = TensorView::contiguous(k_.data(), {blocks_, bs, hkv, c_.D});
      cache.v = TensorView::contiguous(v_.data(), {blocks_, bs, hkv, c_.Dv});
    } else {
      cache.k = TensorView::contiguous(k_.data(), {blocks_, hkv, bs, c_.D});
      cache.v = TensorView::contiguous(v_.data(), {blocks_, hkv, bs, c_.Dv});
    }
    cache.block_table = TensorView::contiguous(table_.data(), DType::Int32, {B_, width_});
    cache.seq_lens = TensorView::contiguous(seq_lens_.data(), DType::Int32, {B_});
    cache.layout = c_.layout;
    return cache;
  }
  TensorView q() { return TensorView::contiguous(q_.data(), {B_, c_.H, c_.Sq, c_.D}); }
  TensorView out() { return TensorView::contiguous(out_.data(), {B_, c_.H, c_.Sq, c_.Dv}); }
  attention::SdpaOptions& options() { return options_; }
  std::vector<int32_t>& table() { return table_; }
  std::vector<int32_t>& seq_lens() { return seq_lens_; }
  // Every out element 0 and every logsumexp -inf (rows that see no key), nothing past the ends.
  bool all_rows_without_keys() const {
    const auto zero = [](float x) { return x == 0.0f; };
    const auto minus_inf = [](float x) { return x == -INFINITY; };
    return std::all_of(out_.begin(), out_.end() - 1, zero) && std::isnan(out_.back()) &&
           std::all_of(lse_.begin(), lse_.end() - 1, minus_inf) && std::isnan(lse_.back());
  }
  bool untouched() const {
    return std::all_of(out_.begin(), out_.end(), [](float x) { return std::isnan(x); }) &&
           std::all_of(lse_.begin(), lse_.end(), [](float x) { return std::isnan(x); });
  }

  // A half cache holds the pool's values rounded (HalfCopy); the reference then reads the
  // rounded values, so the fp32 output meets the fp32 rule.
  void run_and_compare() {
    attention::PagedKvCache paged = cache();
    std::optional<attention_test::HalfCopy> hk, hv;
    if (c_.cache_dtype != DType::Float32) {
      hk.emplace(paged.k, c_.cache_dtype);
      hv.emplace(paged.v, c_.cache_dtype);
      paged.k = hk->view();
      paged.v = hv->view();
      std::copy_n(static_cast<const float*>(hk->rounded().data), k_.size(), k_.begin());
      std::copy_n(static_cast<const float*>(hv->rounded().data), v_.size(), v_.begin());
    }
    options_.gpu.workspace_limit = smallest_chunks_every_other_call();
    const attention::Status status = attention::paged_attention(q(), paged, out(), options_);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_TRUE(std::isnan(out_.back())) << "out written past its end";
    EXPECT_TRUE(std::isnan(lse_.back())) << "logsumexp written past its end";
    const int64_t H = c_.H, Sq = c_.Sq, Dv = c_.Dv;
    std::vector<double> expected(static_cast<size_t>(B_ * H * Sq * Dv), 0.0);
    std::vector<double> expected_lse(static_cast<size_t>(B_ * H * Sq), -INFINITY);
    for (int64_t b = 0; b < B_; ++b) {
      // The sequence's valid rows are its last tokens: reference SDPA of those rows against
      // its keys, gathered here, with the masks aligned bottom-right; other rows are zeros.
      const int64_t rows = c_.query_lengths ? query_lengths_[b] : Sq, Sk = seq_lens_[b];
      if (rows == 0) continue;
      std::vector<float> kb(static_cast<size_t>(c_.Hkv * Sk * c_.D)),
          vb(static_cast<size_t>(c_.Hkv * Sk * Dv));
      for (int64_t h = 0; h < c_.Hkv; ++h)
        for (int64_t j = 0; j < Sk; ++j) {
          const int64_t blk = table_[b * width_ + j / c_.block_size], slot = j % c_.block_size;
          std::copy_n(&k_[offset(blk, slot, h, c_.D)], c_.D, &kb[(h * Sk + j) * c_.D]);
          std::copy_n(&v_[offset(blk, slot, h, Dv)], Dv, &vb[(h * Sk + j) * Dv]);
        }
      attention::MaskOptions mask;
      mask.causal = c_.causal;
      mask.window = c_.window;
      mask.window_forward = c_.window_forward;
      mask.alibi = c_.alibi;
      mask.softcap = c_.softcap;
      const TensorView qb = TensorView::strided(&q_[b * H * Sq * c_.D], {1, H, rows, c_.D},
                                                {H * Sq * c_.D, Sq * c_.D, c_.D, 1});
      std::vector<double> ref, ref_lse;
      reference_sdpa(qb, TensorView::contiguous(kb.data(), {1, c_.Hkv, Sk, c_.D}),
                     TensorView::contiguous(vb.data(), {1, c_.Hkv, Sk, Dv}),
                     1.0 / std::sqrt(double(c_.D)), &ref, &ref_lse, mask.empty() ? nullptr : &mask);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < rows; ++i) {
          expected_lse[(b * H + h) * Sq + i] = ref_lse[h * rows + i];
          for (int64_t d = 0; d < Dv; ++d)
            expected[((b * H + h) * Sq + i) * Dv + d] = ref[(h * rows + i) * Dv + d];
        }
    }
    const std::vector<float> out(out_.begin(), out_.end() - 1), lse(lse_.begin(), lse_.end() - 1);
    EXPECT_TRUE(attention_test::matches_reference(out, expected, {B_, H, Sq, Dv})) << "in out";
    if (!c_.logsumexp) {
      EXPECT_TRUE(std::all_of(lse_.begin(), lse_.end(), [](float x) { return std::isnan(x); }));
      return;
    }
    EXPECT_TRUE(attention_test::matches_reference(lse, expected_lse, {B_, H, Sq},
                                                  attention_test::Domain::Log))
        << "in logsumexp";
  }

 private:
  // On a GPU backend, every other call: the least workspace a paged call accepts, one kv head's
  // query heads with every row (so a chunk per kv head and batch); 0 (the default) otherwise.
  int64_t smallest_chunks_every_other_call() const {
    namespace detail = attention::detail;
    const attention::Backend backend = options_.backend;
    static int calls = 0;
    if (backend != attention::Backend::CUDA && backend != attention::Backend::OpenCL) return 0;
    if (calls++ % 2 == 0) return 0;
    const detail::Run run =
        backend == attention::Backend::CUDA ? detail::Run::CUDA : detail::Run::OpenCL;
    const char* kernel = detail::paged_decode_kernel(run, c_.cache_dtype).name;
    return attention_contract::gpu_split_workspace_bytes(
        c_.H / c_.Hkv, c_.Sq, width_ * c_.block_size, c_.Dv, detail::kernel_gpu_tiling(kernel));
  }

  // Element offset of (block, slot, kv head, feature 0) in the pool's layout.
  int64_t offset(int64_t blk, int64_t slot, int64_t h, int64_t features) const {
    const int64_t bs = c_.block_size, hkv = c_.Hkv;
    return c_.layout == PagedKvLayout::BlocksSlotsHeads
               ? ((blk * bs + slot) * hkv + h) * features
               : ((blk * hkv + h) * bs + slot) * features;
  }

  PagedCase c_;
  std::mt19937_64 rng_;
  int64_t B_ = 0, width_ = 0, blocks_ = 0;
  std::vector<int32_t> table_, seq_lens_, query_lengths_;
  std::vector<float> k_, v_, q_, out_, lse_;
  attention::SdpaOptions options_;
};

void expect_paged_matches_reference(const PagedCase& c) {
  if (attention_test::skip_unless_backend_available()) return;
  const uint64_t seed = attention_test::seed_for_current_test();
  SCOPED_TRACE(describe(c) + ", " + attention_test::seed_note(seed));
  PagedRun run(c, seed);
  run.run_and_compare();
}

TEST(PagedAttention, DecodeMatchesReference) {
  PagedCase c;
  c.H = 4;
  c.Hkv = 2;
  c.D = 40;
  c.Dv = 24;
  c.seq_lens = {37, 1, 16, 0, 129, 64};
  for (int64_t block_size : {16, 4, 1}) {
    for (PagedKvLayout layout : {PagedKvLayout::BlocksSlotsHeads, PagedKvLayout::BlocksHeadsSlots}) {
      c.block_size = block_size;
      c.layout = layout;
      expect_paged_matches_reference(c);
    }
  }
}

TEST(PagedAttention, HalfCaches) {
  PagedCase c;
  c.H = 8;
  c.Hkv = 2;
  c.D = c.Dv = 64;
  c.seq_lens = {100, 1, 33, 0};
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    c.cache_dtype = dtype;
    c.Sq = 1;
    expect_paged_matches_reference(c);
    c.Sq = 3;
    c.layout = PagedKvLayout::BlocksHeadsSlots;
    expect_paged_matches_reference(c);
  }
}

TEST(PagedAttention, DecodeD128WithoutGqa) {
  PagedCase c;
  c.H = c.Hkv = 3;
  c.D = c.Dv = 128;
  c.block_size = 64;
  c.seq_lens = {300, 65, 2};
  c.causal = attention::Causal::None;
  expect_paged_matches_reference(c);
}

// The CPU's key splits follow the thread count (a few work items per thread: one split of 1536 keys
// on one thread, 768 keys per split on two, 256 on 16) except for a heads-major pool without GQA;
// every count matches the reference, for both layouts, with and without GQA.
TEST(PagedAttention, SplitsForEveryThreadCount) {
  const attention_test::DefaultThreadsOnExit restore;
  PagedCase c;
  c.Hkv = 2;
  c.D = c.Dv = 64;
  c.block_size = 16;
  c.seq_lens = {1500, 700};
  c.causal = attention::Causal::None;
  for (int threads : {1, 2, 16}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    attention::set_num_threads(threads);
    for (PagedKvLayout layout : {PagedKvLayout::BlocksSlotsHeads, PagedKvLayout::BlocksHeadsSlots}) {
      c.layout = layout;
      for (int64_t H : {2, 8}) {
        c.H = H;
        expect_paged_matches_reference(c);
      }
    }
  }
}

// GQA decode whose group makes the decode kernels' row blocks (4 or 8 rows at D = 128): the CPU
// runs each kv head's query heads as its rows where the mask treats rows alike (none, softcap,
// bottom-right causal of one row), per head otherwise; blocks smaller than the kernel's chunks of
// keys, Dv without the P·V pairs (96), half caches.
TEST(PagedAttention, GqaDecodeRowBlock) {
  PagedCase c;
  c.H = 8;
  c.Hkv = 2;
  c.D = c.Dv = 128;
  c.seq_lens = {37, 1, 0, 300};
  expect_paged_matches_reference(c);
  c.block_size = 4;
  c.layout = PagedKvLayout::BlocksHeadsSlots;
  c.softcap = 4.0f;
  expect_paged_matches_reference(c);
  c.block_size = 64;
  c.Dv = 96;
  c.causal = attention::Causal::None;
  expect_paged_matches_reference(c);
  c.Dv = 128;
  c.H = 4;
  c.Sq = 2;  // 2 heads x 2 rows
  expect_paged_matches_reference(c);
  c.causal = attention::Causal::BottomRight;  // rows differ, and a sequence has too few keys for
  // the split of PagedAttention.DraftRowsAsDecodeRowBlock: per head
  expect_paged_matches_reference(c);
  c.Sq = 1;
  c.H = 8;
  c.block_size = 16;
  c.cache_dtype = DType::BFloat16;
  expect_paged_matches_reference(c);
  c.cache_dtype = DType::Float32;
  c.H = 16;  // groups of 8: two blocks of 4 rows
  expect_paged_matches_reference(c);
  c.layout = PagedKvLayout::BlocksSlotsHeads;
  c.causal = attention::Causal::None;
  c.H = 8;
  c.Sq = 2;  // 4 heads x 2 rows
  expect_paged_matches_reference(c);
  c.Dv = 96;
  c.cache_dtype = DType::Float16;
  expect_paged_matches_reference(c);
}

// GQA decode over a heads-major pool on AVX2 (through the dispatch hook, as on an AVX2-only CPU)
// runs through copies of each kv head's keys once a sequence has 2048 keys: masks measured from
// each sequence's end, query lengths, a sequence without keys, a half cache, Dv != D.
TEST(PagedAttention, HeadsMajorGqaDecodeOnAvx2) {
  const attention_test::Avx2VariantScope avx2;
  if (!avx2.skip_reason().empty()) GTEST_SKIP() << avx2.skip_reason();
  PagedCase c;
  c.H = 8;
  c.Hkv = 2;
  c.D = c.Dv = 64;
  c.layout = PagedKvLayout::BlocksHeadsSlots;
  c.seq_lens = {2100, 0, 1, 700};
  expect_paged_matches_reference(c);
  c.block_size = 64;
  c.window = 900;
  c.alibi = true;
  c.query_lengths = true;
  c.Dv = 40;
  expect_paged_matches_reference(c);
  c.H = 16;  // groups of 8
  c.window = -1;
  c.alibi = false;
  c.query_lengths = false;
  c.softcap = 5.0f;
  c.cache_dtype = DType::Float16;
  c.seq_lens = {2048};
  expect_paged_matches_reference(c);
}

// A few query rows at D = 128 (speculative decoding's draft tokens) run as the decode kernels' row
// blocks where the sequences average 128 keys or more: 2 or 3 rows of a head without GQA (padded
// to 4), 2 rows of a pair or a group of 4 query heads under bottom-right causal. The keys every
// valid row sees as a decode call, the last rows - 1 copied and merged by logsumexp. Query
// lengths, causal and not, a softcap, both layouts, a half cache, Dv != D, blocks shorter and
// longer than the tail, a sequence of exactly rows - 1 keys. 6 rows of a head take the chunked
// prefill's copies, then the contiguous 8-row block.
TEST(PagedAttention, DraftRowsAsDecodeRowBlock) {
  PagedCase c;
  c.D = 128;
  c.Dv = 64;
  c.block_size = 2;
  for (int64_t rows : {2, 3}) {
    c.H = c.Hkv = 3;
    c.Sq = rows;
    c.seq_lens = {300, rows - 1, 17, 200};
    c.query_lengths = false;
    c.causal = attention::Causal::BottomRight;
    c.layout = PagedKvLayout::BlocksSlotsHeads;
    c.cache_dtype = DType::Float32;
    expect_paged_matches_reference(c);
    c.query_lengths = true;
    c.softcap = 3.0f;
    c.layout = PagedKvLayout::BlocksHeadsSlots;
    expect_paged_matches_reference(c);
    c.causal = attention::Causal::None;
    c.cache_dtype = DType::BFloat16;
    expect_paged_matches_reference(c);
    c.softcap = 0.0f;
    // A forward reach: the rows' prefix runs without causal, and without the reach.
    c.causal = attention::Causal::BottomRight;
    c.window_forward = 1;
    expect_paged_matches_reference(c);
    c.window_forward = 0;
  }
  c.H = 4;
  c.Hkv = 2;
  c.Sq = 2;
  c.block_size = 16;
  c.causal = attention::Causal::BottomRight;
  c.query_lengths = true;
  expect_paged_matches_reference(c);
  c.H = 8;  // a group of 4: 8 rows per kv head, two row blocks
  expect_paged_matches_reference(c);
  c.query_lengths = false;
  c.layout = PagedKvLayout::BlocksSlotsHeads;
  expect_paged_matches_reference(c);
  // 6 rows of a head: the chunked prefill's copies, each sequence of 128 keys or more then as the
  // 8-row block (run_grouped_query_rows).
  c.H = c.Hkv = 2;
  c.Sq = 6;
  c.seq_lens = {300, 5, 140};
  c.query_lengths = false;
  expect_paged_matches_reference(c);
}

// GQA decode whose masks differ by query head (ALiBi) or by row (a window), over both layouts: the
// CPU runs it per head, not as rows, through the whole-split kernel for a [blocks, slots, heads, D]
// pool (P·V over every key of a split, keys past a sequence's end included) and the predicated one
// for a heads-major pool; sequences of 0 and 1 keys, a Dv that is no whole number of vectors.
TEST(PagedAttention, GqaDecodePerHeadMasks) {
  PagedCase c;
  c.H = 8;
  c.Hkv = 2;
  c.D = 64;
  c.Dv = 40;
  c.seq_lens = {300, 1, 0, 77};
  c.share_prefix = true;
  for (PagedKvLayout layout : {PagedKvLayout::BlocksSlotsHeads, PagedKvLayout::BlocksHeadsSlots}) {
    c.layout = layout;
    c.alibi = true;
    c.window = -1;
    expect_paged_matches_reference(c);
    c.alibi = false;
    c.window = 20;
    expect_paged_matches_reference(c);
  }
  c.layout = PagedKvLayout::BlocksSlotsHeads;
  c.alibi = true;
  c.softcap = 3.0f;
  c.Dv = 64;
  c.cache_dtype = DType::Float16;
  expect_paged_matches_reference(c);
}

// A window leaves whole blocks behind for every row: the call runs on a table without them
// (run_paged_window). Windows of 0, a block and a half and most of a sequence; one and three
// rows, with and without query lengths; both layouts, GQA, ALiBi, a bf16 cache; sequences of 0,
// 1 and a block's keys beside long ones; a forward reach.
TEST(PagedAttention, WindowsDropTheBlocksNoRowSees) {
  PagedCase c;
  c.H = 4;
  c.Hkv = 2;
  c.D = c.Dv = 16;
  c.block_size = 4;
  c.seq_lens = {300, 0, 1, 4, 129};
  for (const int64_t window : {0, 6, 250}) {
    for (const int64_t rows : {1, 3}) {
      c.window = window;
      c.Sq = rows;
      c.query_lengths = rows > 1;
      c.layout = PagedKvLayout::BlocksSlotsHeads;
      expect_paged_matches_reference(c);
      c.layout = PagedKvLayout::BlocksHeadsSlots;
      c.alibi = true;
      c.cache_dtype = DType::BFloat16;
      expect_paged_matches_reference(c);
      c.alibi = false;
      c.cache_dtype = DType::Float32;
      c.window_forward = 2;
      c.block_size = 16;
      expect_paged_matches_reference(c);
      c.window_forward = 0;
      c.block_size = 4;
    }
  }
}

// Several new tokens per sequence against its own cache length, with every mask the paged kernel
// takes, and a block shared by two sequences (a common prefix).
TEST(PagedAttention, ChunkedPrefillPerSequenceLengths) {
  PagedCase c;
  c.H = 6;
  c.Hkv = 2;
  c.Sq = 7;
  c.D = c.Dv = 32;
  c.block_size = 8;
  c.seq_lens = {40, 40, 7, 3, 91};
  c.share_prefix = true;
  expect_paged_matches_reference(c);
  c.window = 11;
  c.query_lengths = true;
  expect_paged_matches_reference(c);
  c.window = -1;
  c.alibi = true;
  c.softcap = 4.0f;
  c.layout = PagedKvLayout::BlocksHeadsSlots;
  expect_paged_matches_reference(c);
  c.causal = attention::Causal::None;
  expect_paged_matches_reference(c);
  // GQA's rows above run through copies of the keys (run_paged_prefill_cpu); 4 rows of one head
  // per kv head at D = 32 stay on the paged kernel.
  c.H = c.Hkv = 2;
  c.Sq = 4;
  c.causal = attention::Causal::BottomRight;
  expect_paged_matches_reference(c);
}

// A chunked prefill whose sequence holds more than the CPU's copy of a few kv heads takes (8 MiB,
// at least a kv head per thread: detail's kCopyBytes): one call per kv head there on one thread,
// per two on two, each given its heads' share of ALiBi's standard slopes (which depend on the
// call's H). Both layouts, query lengths, a half cache.
TEST(PagedAttention, ChunkedPrefillOfLongSequences) {
  const attention_test::DefaultThreadsOnExit restore;
  PagedCase c;
  c.H = 6;
  c.Hkv = 3;
  c.Sq = 3;
  c.D = c.Dv = 64;
  c.block_size = 64;
  c.alibi = true;
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    attention::set_num_threads(threads);
    c.layout = PagedKvLayout::BlocksSlotsHeads;
    c.query_lengths = false;
    c.cache_dtype = DType::Float32;
    c.seq_lens = {8200, 17};  // 8200 · 128 · 4 bytes: 4.0 MiB per kv head
    expect_paged_matches_reference(c);
    c.layout = PagedKvLayout::BlocksHeadsSlots;
    c.query_lengths = true;
    c.cache_dtype = DType::BFloat16;
    c.seq_lens = {16500, 17};  // 16500 · 128 · 2 bytes: 4.0 MiB per kv head
    expect_paged_matches_reference(c);
  }
}

// logsumexp with its shape but no data is skipped (attention.h), on every CPU route: the paged
// kernel writing rows past query_lengths, the chunked-prefill copies, and length groups.
TEST(PagedAttention, LogsumexpShapeWithoutDataIsSkipped) {
  PagedCase c;
  c.logsumexp = false;
  c.query_lengths = true;
  c.D = c.Dv = 32;
  c.H = c.Hkv = 4;
  c.Sq = 2;
  c.seq_lens = {40, 0, 17};
  expect_paged_matches_reference(c);
  c.H = 8;
  c.Hkv = 2;
  c.Sq = 4;
  expect_paged_matches_reference(c);
  c.Sq = 2;
  c.seq_lens = {700, 0, 5, 300, 64, 1, 129};
  expect_paged_matches_reference(c);
}

// A batch of very different cache lengths: the CPU runs it in groups of similar length
// (detail::paged_length_groups), each group's rows gathered into a call of its own: GQA, several
// query rows with their own lengths, both layouts, a half cache, and groups whose sequences have
// no keys at all.
TEST(PagedAttention, MixedLengthsRunInGroups) {
  PagedCase c;
  c.H = 8;
  c.Hkv = 2;
  c.Sq = 2;
  c.D = c.Dv = 64;
  c.seq_lens = {700, 0, 5, 300, 64, 1, 129};
  c.query_lengths = true;
  expect_paged_matches_reference(c);
  c.layout = PagedKvLayout::BlocksHeadsSlots;
  c.cache_dtype = DType::Float16;
  expect_paged_matches_reference(c);
  c.Sq = 1;
  c.H = c.Hkv = 4;
  c.D = c.Dv = 128;
  c.query_lengths = false;
  c.layout = PagedKvLayout::BlocksSlotsHeads;
  c.cache_dtype = DType::Float32;
  c.seq_lens = {0, 200, 0};  // the keyless sequences make a group of their own
  expect_paged_matches_reference(c);
}

// Strided q and out (padded rows, heads apart) through the CPU groups: each row gathered from and
// written back to its own place, the padding untouched, the same values as dense views.
TEST(PagedAttention, MixedLengthsWithStridedRows) {
  if (attention_test::skip_unless_backend_available()) return;
  PagedCase c;
  c.H = 4;
  c.Hkv = 2;
  c.Sq = 3;
  c.D = c.Dv = 32;
  c.seq_lens = {400, 7, 0, 150, 33};
  PagedRun run(c, attention_test::seed_for_current_test());
  const int64_t B = static_cast<int64_t>(c.seq_lens.size()), H = c.H, Sq = c.Sq, D = c.D;
  const TensorView dense_q = run.q(), dense_out = run.out();
  ASSERT_TRUE(attention::paged_attention(dense_q, run.cache(), dense_out, run.options()).ok());
  // Rows D + 3 apart, heads one row further apart, batches two heads further.
  const int64_t row = D + 3, head = Sq * row + row, batch = H * head + 2 * head;
  std::vector<float> q(static_cast<size_t>(B * batch), kNaN), out(q.size(), kNaN);
  const auto at = [&](int64_t b, int64_t h, int64_t i) { return b * batch + h * head + i * row; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i)
        std::copy_n(static_cast<const float*>(dense_q.data) + ((b * H + h) * Sq + i) * D, D,
                    &q[at(b, h, i)]);
  attention::SdpaOptions options = run.options();
  options.logsumexp = TensorView();
  const auto view = [&](std::vector<float>& data) {
    return TensorView::strided(data.data(), {B, H, Sq, D}, {batch, head, row, 1});
  };
  const attention::Status status =
      attention::paged_attention(view(q), run.cache(), view(out), options);
  ASSERT_TRUE(status.ok()) << status.message();
  std::vector<bool> written(out.size(), false);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i)
        for (int64_t d = 0; d < D; ++d) {
          const float expected =
              static_cast<const float*>(dense_out.data)[((b * H + h) * Sq + i) * D + d];
          ASSERT_EQ(out[at(b, h, i) + d], expected) << "b " << b << " h " << h << " i " << i;
          written[at(b, h, i) + d] = true;
        }
  for (size_t e = 0; e < out.size(); ++e) {
    if (!written[e]) {
      ASSERT_TRUE(std::isnan(out[e])) << "padding written at " << e;
    }
  }
}

// The grouping rule itself: every sequence in exactly one group, longest groups first, each
// sequence holding more than half of its group's longest (in units of the least split), and one
// group in the batch's order when grouping would save less than a fifth.
TEST(PagedLengthGroups, SplitsOnlyWhereItSaves) {
  namespace detail = attention::detail;
  constexpr int64_t unit = attention_contract::kSplitKeyMultiple;
  const auto units = [&](int64_t keys) { return (std::max<int64_t>(keys, 1) + unit - 1) / unit; };
  const std::vector<std::vector<int64_t>> batches = {{512, 16, 16, 16, 16, 16, 16, 16},
                                                     {37, 1, 16, 0, 129, 64},
                                                     {4096, 3000, 1, 2048, 700, 0},
                                                     {1000, 1000, 900, 500},
                                                     {0, 200, 0},
                                                     {5}};
  for (const std::vector<int64_t>& lengths : batches) {
    SCOPED_TRACE(::testing::PrintToString(lengths));
    const auto groups = detail::paged_length_groups(lengths);
    std::vector<int> seen(lengths.size(), 0);
    int64_t padded = 0, longest_before = INT64_MAX;
    for (const auto& group : groups) {
      ASSERT_FALSE(group.empty());
      const int64_t longest = units(lengths[group[0]]);
      if (groups.size() > 1) {
        EXPECT_LT(longest, longest_before);
        for (int64_t b : group) EXPECT_GT(2 * units(lengths[b]), longest) << "sequence " << b;
      }
      longest_before = longest;
      padded += longest * static_cast<int64_t>(group.size());
      for (int64_t b : group) ++seen[static_cast<size_t>(b)];
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    int64_t whole = 0;
    for (int64_t n : lengths) whole = std::max(whole, units(n));
    whole *= static_cast<int64_t>(lengths.size());
    if (groups.size() > 1) {
      EXPECT_LE(5 * padded, 4 * whole);
    } else {
      std::vector<int64_t> in_order(lengths.size());
      std::iota(in_order.begin(), in_order.end(), 0);
      EXPECT_EQ(std::vector<int64_t>(groups[0].begin(), groups[0].end()), in_order);
    }
  }
  EXPECT_EQ(detail::paged_length_groups({512, 16, 16, 16, 16, 16, 16, 16}).size(), 2u);
  EXPECT_EQ(detail::paged_length_groups({1000, 1000, 900, 500}).size(), 1u);
}

TEST(PagedAttention, RandomCases) {
  std::mt19937_64 rng(attention_test::seed_for_current_test());
  for (int n = 0; n < 12; ++n) {
    PagedCase c;
    c.Hkv = uniform(rng, 1, 3);
    c.H = c.Hkv * uniform(rng, 1, 4);
    c.Sq = uniform(rng, 1, 3) == 1 ? uniform(rng, 2, 9) : 1;
    c.D = uniform(rng, 1, 70);
    c.Dv = uniform(rng, 1, 70);
    c.block_size = int64_t{1} << uniform(rng, 0, 6);
    c.layout =
        uniform(rng, 0, 1) ? PagedKvLayout::BlocksSlotsHeads : PagedKvLayout::BlocksHeadsSlots;
    for (int64_t b = uniform(rng, 1, 4); b > 0; --b) c.seq_lens.push_back(uniform(rng, 0, 200));
    c.causal = uniform(rng, 0, 1) ? attention::Causal::BottomRight : attention::Causal::None;
    if (c.causal == attention::Causal::BottomRight && uniform(rng, 0, 1))
      c.window = uniform(rng, 0, 40);
    c.query_lengths = uniform(rng, 0, 3) == 0;
    c.alibi = uniform(rng, 0, 3) == 0;
    c.extra_columns = uniform(rng, 0, 2);
    expect_paged_matches_reference(c);
  }
}

// Random calls over every route paged_attention takes on the CPU: one row over either layout (the
// whole-split and row-block kernels), draft rows (as decode row blocks at D = 128), chunked
// prefill through copies, windows that leave whole blocks behind, batches split by length, half
// caches, shared prefixes and logsumexp without data. ATTENTION_PAGED_CASES=N runs N (default 4;
// a long mode, docs/testing.md, "Reliability").
void expect_random_paged_cases_match_reference() {
  std::mt19937_64 rng(attention_test::seed_for_current_test());
  const int cases = attention_test::random_case_count("ATTENTION_PAGED_CASES", 4);
  for (int n = 0; n < cases; ++n) {
    PagedCase c;
    c.Hkv = uniform(rng, 1, 3);
    c.H = c.Hkv * (int64_t{1} << uniform(rng, 0, 3));
    const int64_t rows = uniform(rng, 0, 4);
    c.Sq = rows <= 1   ? 1
           : rows == 2 ? uniform(rng, 2, 3)
           : rows == 3 ? uniform(rng, 4, 8)
                       : uniform(rng, 9, 20);
    c.D = uniform(rng, 0, 2) ? 128 : uniform(rng, 0, 1) ? 64 : uniform(rng, 1, 130);
    c.Dv = uniform(rng, 0, 3) ? c.D : uniform(rng, 1, 130);
    c.block_size = int64_t{1} << uniform(rng, 0, 6);
    c.layout =
        uniform(rng, 0, 1) ? PagedKvLayout::BlocksSlotsHeads : PagedKvLayout::BlocksHeadsSlots;
    const int64_t length_range = uniform(rng, 0, 5);
    const int64_t longest = length_range == 0 ? 2600 : length_range <= 2 ? 700 : 200;
    for (int64_t b = uniform(rng, 1, 6); b > 0; --b)
      c.seq_lens.push_back(uniform(rng, 0, 4) == 0 ? uniform(rng, 0, 3) : uniform(rng, 0, longest));
    c.causal = uniform(rng, 0, 3) ? attention::Causal::BottomRight : attention::Causal::None;
    if (c.causal == attention::Causal::BottomRight) {
      if (uniform(rng, 0, 2) == 0) c.window = uniform(rng, 0, 300);
      if (uniform(rng, 0, 4) == 0) c.window_forward = uniform(rng, 0, 20);
    }
    c.query_lengths = uniform(rng, 0, 3) == 0;
    c.alibi = uniform(rng, 0, 4) == 0;
    if (uniform(rng, 0, 4) == 0) c.softcap = 30.0f;
    c.share_prefix = uniform(rng, 0, 3) == 0;
    c.logsumexp = uniform(rng, 0, 5) != 0;
    c.extra_columns = uniform(rng, 0, 2);
    const int64_t dtype = uniform(rng, 0, 5);
    c.cache_dtype = dtype == 0 ? DType::Float16 : dtype == 1 ? DType::BFloat16 : DType::Float32;
    expect_paged_matches_reference(c);
  }
}

TEST(PagedAttention, RandomServingRoutes) { expect_random_paged_cases_match_reference(); }

// The same on the AVX2 variant, whose heads-major GQA decode (sequences past 2048 keys) runs
// through copies of the keys.
TEST(PagedAttention, RandomServingRoutesOnAvx2) {
  const attention_test::Avx2VariantScope avx2;
  if (!avx2.skip_reason().empty()) GTEST_SKIP() << avx2.skip_reason();
  expect_random_paged_cases_match_reference();
}

// Bad caches: an error naming the argument (the sequence and block for a bad id), nothing written.
class PagedValidation : public ::testing::Test {
 protected:
  static PagedCase base_case() {
    PagedCase c;
    c.H = 2;
    c.Hkv = 1;
    c.block_size = 4;
    c.seq_lens = {6, 9};
    return c;
  }
  PagedValidation() : run_(base_case(), 3) {}
  void expect_error(const attention::PagedKvCache& cache, const std::string& needle,
                    attention::StatusCode code = attention::StatusCode::InvalidArgument) {
    const attention::Status status =
        attention::paged_attention(run_.q(), cache, run_.out(), run_.options());
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), code) << status.message();
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
    EXPECT_TRUE(run_.untouched()) << "an output was written";
  }
  PagedRun run_;
};

TEST_F(PagedValidation, BlockIdsOutOfRange) {
  run_.table()[4 + 2] = 1000;  // sequence 1, block 2 (keys 8..11; 9 keys use 3 blocks)
  expect_error(run_.cache(), "cache.block_table[1, 2] = 1000 is outside [0, num_blocks=");
  run_.table()[4 + 2] = -2;
  expect_error(run_.cache(), "(sequence 1, block 2)");
}

TEST_F(PagedValidation, UnusedEntriesAreNotRead) {
  // Entries past a sequence's length may hold anything (vLLM pads with -1 or stale ids).
  run_.table()[3] = 1 << 30;
  EXPECT_TRUE(attention::paged_attention(run_.q(), run_.cache(), run_.out(), run_.options()).ok());
}

TEST_F(PagedValidation, LengthsBeyondTheTable) {
  run_.seq_lens()[0] = 17;  // the table holds 4 blocks of 4
  expect_error(run_.cache(), "cache.seq_lens[0] = 17 is outside [0, 16]");
  run_.seq_lens()[0] = -1;
  expect_error(run_.cache(), "cache.seq_lens[0] = -1");
}

TEST_F(PagedValidation, ShapesLayoutsAndOptions) {
  attention::PagedKvCache cache = run_.cache();
  attention::PagedKvCache odd = cache;
  odd.k.shape[1] = odd.v.shape[1] = 3;  // a block size of 3 (views of the same memory)
  expect_error(odd, "block_size must be a power of two, got 3");
  attention::PagedKvCache bad_v = cache;
  bad_v.v.shape[2] = 2;
  expect_error(bad_v, "cache.v: expected shape");
  attention::PagedKvCache mixed = cache;
  mixed.v.dtype = DType::Float16;
  expect_error(mixed, "cache.v: expected the dtype of cache.k");
  attention::PagedKvCache bad_table = cache;
  bad_table.block_table.shape[0] = 3;
  expect_error(bad_table, "cache.block_table: expected shape [B=2");
  run_.options().mask.causal = attention::Causal::TopLeft;
  expect_error(cache, "mask.causal");
  run_.options().mask.causal = attention::Causal::BottomRight;
  std::vector<int32_t> lengths = {1, 1};
  run_.options().mask.key_lengths = TensorView::contiguous(lengths.data(), DType::Int32, {2});
  expect_error(cache, "mask.key_lengths");
  run_.options().mask.key_lengths = {};
  int stream = 0;
  run_.options().gpu.cuda_stream = &stream;
  expect_error(cache, "gpu.cuda_stream: set, but the call runs on the CPU backend");
  run_.options().gpu.cuda_stream = nullptr;
  attention::PagedKvCache device_table = cache;  // the table is read by the checks: host only
  device_table.block_table.device = attention::Device::CUDA;
  expect_error(device_table, "cache.block_table: expected a CPU tensor");
  run_.options().rope = attention::RopeOptions{};  // the cache holds rotated keys
  expect_error(cache, "rope: paged_attention takes a cache of rotated keys",
               attention::StatusCode::Unsupported);
}

// A device code outside the enum on every tensor is refused before any route runs (found by the
// fuzzer: the chunked prefill's copies are host tensors, and its inner calls refused the code only
// after writing rows).
TEST(PagedAttention, UnknownDeviceOnEveryTensorIsRejected) {
  PagedCase c;
  c.H = 2;
  c.Hkv = 1;
  c.Sq = 8;  // the chunked prefill
  c.seq_lens = {5, 11};
  PagedRun run(c, 4);
  run.options().logsumexp = TensorView();  // a CPU tensor: it would be refused as a mismatch
  TensorView q = run.q(), out = run.out();
  attention::PagedKvCache cache = run.cache();
  for (TensorView* t : {&q, &out, &cache.k, &cache.v})
    t->device = static_cast<attention::Device>(2);
  const attention::Status status = attention::paged_attention(q, cache, out, run.options());
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("q: device code 2 is not a Device"), std::string::npos)
      << status.message();
  EXPECT_TRUE(run.untouched()) << "an output was written";
}

// GPU calls (OpenCL here; CUDA where a GPU is): a workspace limit below one kv head's query heads
// with every row is refused, naming the option and the least it needs; a CUDA stream on OpenCL too.
TEST_F(PagedValidation, GpuWorkspaceAndStream) {
  const attention::Status available = attention::backend_available(attention::Backend::OpenCL);
  if (!available.ok()) GTEST_SKIP() << available.message();
  run_.options().backend = attention::Backend::OpenCL;
  run_.options().gpu.workspace_limit = 1024;
  expect_error(run_.cache(), "gpu.workspace_limit: 1024 bytes is below the");
  run_.options().gpu.workspace_limit = 0;
  int stream = 0;
  run_.options().gpu.cuda_stream = &stream;
  expect_error(run_.cache(), "gpu.cuda_stream: set, but the call runs on the OpenCL backend");
}

// Empty GPU calls need no workspace: no query rows (nothing to write), and a table without columns
// (every sequence empty: zero rows and logsumexp -inf, written on the host).
TEST(PagedGpu, EmptyCalls) {
  const attention::Status available = attention::backend_available(attention::Backend::OpenCL);
  if (!available.ok()) GTEST_SKIP() << available.message();
  PagedCase c;
  c.H = 2;
  c.seq_lens = {5, 0};
  PagedRun run(c, attention_test::seed_for_current_test());
  run.options().backend = attention::Backend::OpenCL;
  attention::TensorView q = run.q(), out = run.out();
  q.shape[2] = out.shape[2] = 0;
  attention::SdpaOptions options = run.options();
  options.logsumexp = {};
  const attention::Status no_rows = attention::paged_attention(q, run.cache(), out, options);
  EXPECT_TRUE(no_rows.ok()) << no_rows.message();
  EXPECT_TRUE(run.untouched()) << "an output was written";
  c.seq_lens = {0, 0};
  c.extra_columns = 0;
  PagedRun empty(c, attention_test::seed_for_current_test());
  empty.options().backend = attention::Backend::OpenCL;
  const attention::Status no_keys =
      attention::paged_attention(empty.q(), empty.cache(), empty.out(), empty.options());
  ASSERT_TRUE(no_keys.ok()) << no_keys.message();
  EXPECT_TRUE(empty.all_rows_without_keys());
}

}  // namespace
