// Masked attention (attention::MaskOptions) against the naive reference: every mask alone and in
// combination, both causal alignments at Sq < Sk, Sq > Sk and Sq = 1, fully masked rows, large
// negative additive masks, broadcast mask tensors and NaN at hidden keys.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "attention/attention.h"
#include "call/mask_args.h"
#include "kernel_contract.h"
#include "reference/sdpa_reference.h"
#include "test_util.h"

namespace attention_test {
namespace {

using attention::Causal;

// Shapes that exercise every kernel path: decode (Sq <= 2), one partial prefill tile, several tiles
// with tails, Sq < Sk, Sq > Sk, grouped-query heads, Dv != D.
std::vector<SdpaCase> mask_shapes() {
  return {
      sdpa_case(2, 2, 1, 1, 37, 16, 16),    // decode, Sq = 1
      sdpa_case(1, 2, 2, 2, 29, 8, 12),     // decode, Sq = 2
      sdpa_case(2, 2, 2, 13, 13, 16, 16),   // one partial tile, Sq = Sk
      sdpa_case(1, 4, 2, 70, 133, 32, 24),  // Sq < Sk, tails everywhere
      sdpa_case(2, 2, 1, 100, 61, 64, 64),  // Sq > Sk, D = 64 specialization
  };
}

std::vector<MaskSpec> single_masks() {
  std::vector<MaskSpec> specs;
  MaskSpec m;
  m.causal = Causal::TopLeft;
  specs.push_back(m);
  m.causal = Causal::BottomRight;
  specs.push_back(m);
  m = MaskSpec{};
  m.key_lengths = true;
  specs.push_back(m);
  m = MaskSpec{};
  m.query_lengths = true;
  specs.push_back(m);
  m = MaskSpec{};
  m.bool_mask = true;
  specs.push_back(m);
  m = MaskSpec{};
  m.additive_mask = true;
  specs.push_back(m);
  m = MaskSpec{};
  m.causal = Causal::BottomRight;
  m.window = 5;
  specs.push_back(m);
  m.causal = Causal::TopLeft;
  m.window = 3;
  m.window_forward = 4;
  specs.push_back(m);
  m = MaskSpec{};
  m.alibi = true;
  specs.push_back(m);
  m.custom_slopes = true;
  specs.push_back(m);
  m = MaskSpec{};
  m.softcap = 1.5f;
  specs.push_back(m);
  return specs;
}

std::vector<MaskSpec> combined_masks() {
  std::vector<MaskSpec> specs;
  MaskSpec m;
  m.causal = Causal::TopLeft;
  m.key_lengths = true;
  specs.push_back(m);
  m.causal = Causal::BottomRight;
  m.query_lengths = true;
  specs.push_back(m);
  m = MaskSpec{};
  m.causal = Causal::BottomRight;
  m.window = 7;
  m.alibi = true;
  specs.push_back(m);
  m = MaskSpec{};
  m.bool_mask = true;
  m.additive_mask = true;
  specs.push_back(m);
  m = MaskSpec{};
  m.causal = Causal::TopLeft;
  m.softcap = 2.0f;
  m.alibi = true;
  m.custom_slopes = true;
  m.additive_mask = true;
  m.key_lengths = true;
  specs.push_back(m);
  return specs;
}

// Each shape unmasked, with every single mask and with every combination, logsumexp included.
void expect_every_mask_matches_reference(const std::vector<SdpaCase>& shapes, uint64_t seed) {
  for (const SdpaCase& c : shapes) {
    expect_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), seed);
    for (const std::vector<MaskSpec>& specs : {single_masks(), combined_masks()}) {
      for (const MaskSpec& m : specs) {
        expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
      }
    }
  }
}

TEST(MaskedSdpa, EachMaskAloneMatchesReference) {
  const uint64_t seed = seed_for_current_test();
  for (const SdpaCase& c : mask_shapes()) {
    for (const MaskSpec& m : single_masks()) {
      expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
    }
  }
}

TEST(MaskedSdpa, CombinationsMatchReference) {
  const uint64_t seed = seed_for_current_test();
  for (const SdpaCase& c : mask_shapes()) {
    for (const MaskSpec& m : combined_masks()) {
      expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
    }
  }
}

// Decode with few heads and long KV caches: the runtime splits the keys (split-KV) into 3 to 6
// splits of 512+ keys here, so these check the splits' combine, splits
// a mask leaves empty (key lengths, a window near the end, causal top-left with Sq < Sk) and a last
// split that ends before its key_split. Three query heads (not one) on the first shape: under
// causal top-left its logsumexp is one logit per row, and a single row's logit near 0 would make
// the relative L2 error of that tensor meaningless (fp32 rounding of a dot product that cancels).
TEST(MaskedSdpa, SplitKvDecodeMatchesReference) {
  expect_every_mask_matches_reference(
      {
          sdpa_case(1, 3, 1, 1, 2100, 64, 64),
          sdpa_case(1, 2, 1, 2, 1500, 32, 40).layout(Layout::kPadded),
          sdpa_case(2, 1, 1, 1, 3000, 128, 128),
      },
      seed_for_current_test());
}

// Prefill with long key ranges: each query tile walks its keys in 2-3 splits here (512 keys at
// most, see runtime/src/plan/sdpa_plan.cpp), so these check the per-tile combine, splits a mask leaves empty
// for some tiles (causal, windows, key lengths) and splits skipped entirely.
TEST(MaskedSdpa, PrefillKeySplitsMatchReference) {
  expect_every_mask_matches_reference(
      {
          sdpa_case(1, 2, 1, 100, 1100, 64, 64),
          sdpa_case(1, 1, 1, 60, 1300, 40, 24).layout(Layout::kPadded),
      },
      seed_for_current_test());
}

// Both alignments at Sq < Sk, Sq > Sk, Sq = Sk and Sq = 1, over more than one query tile and with
// strided layouts.
TEST(MaskedSdpa, CausalAlignmentsAllShapes) {
  const uint64_t seed = seed_for_current_test();
  for (Causal causal : {Causal::TopLeft, Causal::BottomRight}) {
    for (auto [sq, sk] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 50}, {2, 50}, {50, 1}, {30, 97}, {97, 30}, {96, 96}, {200, 180}}) {
      MaskSpec m;
      m.causal = causal;
      SdpaCase c = sdpa_case(1, 2, 1, sq, sk, 24, 16).layout(Layout::kPadded).with_logsumexp();
      expect_masked_sdpa_matches_reference(c, m, seed);
    }
  }
}

// Every fourth query row hidden entirely by the boolean mask, and a batch whose key length is 0:
// exact zeros and logsumexp -inf, never NaN.
TEST(MaskedSdpa, FullyMaskedRowsOutputZeros) {
  const uint64_t seed = seed_for_current_test();
  for (int64_t sq : {1, 2, 60}) {
    SdpaCase c = sdpa_case(2, 2, 2, sq, 40, 16, 16).with_logsumexp();
    SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
    SdpaTensors t(c, seed);
    std::vector<uint8_t> allowed(size_t(c.B * c.H * c.Sq * c.Sk), 1);
    for (int64_t n = 0; n < int64_t(allowed.size()); ++n) {
      const int64_t row = n / c.Sk % c.Sq;
      if (row % 4 == 0) allowed[n] = 0;
    }
    std::vector<int32_t> key_lengths = {0, 31};
    attention::MaskOptions m;
    m.bool_mask = attention::TensorView::contiguous(allowed.data(), attention::DType::Bool,
                                                    {c.B, c.H, c.Sq, c.Sk});
    m.key_lengths =
        attention::TensorView::contiguous(key_lengths.data(), attention::DType::Int32, {c.B});
    run_and_compare(c, t.q.view(), t.k.view(), t.v.view(), t.out, t.lse, m);
    if (::testing::Test::IsSkipped()) return;  // a GPU backend this machine cannot run
    const std::vector<float> out = t.out.to_dense(), lse = t.lse.to_dense();
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t i = 0; i < c.Sq; ++i) {
          if (b != 0 && i % 4 != 0) continue;  // rows that see keys
          const int64_t row = (b * c.H + h) * c.Sq + i;
          EXPECT_EQ(lse[row], -INFINITY) << "row " << row;
          for (int64_t d = 0; d < c.Dv; ++d) {
            ASSERT_EQ(out[row * c.Dv + d], 0.0f) << "row " << row << " feature " << d;
          }
        }
  }
}

// -inf and -FLT_MAX (PyTorch's finfo.min idiom) hide keys the same way for partly hidden rows; a
// row hidden only by -FLT_MAX is not "fully masked" (it averages v, as the math path does).
TEST(MaskedSdpa, LargeNegativeAdditiveMasks) {
  const uint64_t seed = seed_for_current_test();
  for (float hidden : {-INFINITY, -FLT_MAX, -1e30f}) {
    for (const SdpaCase& c : mask_shapes()) {
      MaskSpec m;
      m.additive_mask = true;
      m.hidden_value = hidden;
      expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
    }
  }
}

TEST(MaskedSdpa, BroadcastMasksEveryCombination) {
  const uint64_t seed = seed_for_current_test();
  for (bool batch : {false, true}) {
    for (bool head : {false, true}) {
      for (int kind = 0; kind < 3; ++kind) {
        MaskSpec m;
        m.bool_mask = kind != 1;
        m.additive_mask = kind != 0;
        m.mask_batch_broadcast = batch;
        m.mask_head_broadcast = head;
        expect_masked_sdpa_matches_reference(sdpa_case(3, 4, 2, 20, 33, 16, 8), m, seed);
        expect_masked_sdpa_matches_reference(sdpa_case(3, 4, 2, 1, 33, 16, 8), m, seed);
      }
    }
  }
}

// A mask tensor with a transposed (key-major) layout: no stride needs to be 1.
TEST(MaskedSdpa, StridedMaskTensor) {
  const uint64_t seed = seed_for_current_test();
  for (int64_t sq : {2, 37}) {
    SdpaCase c = sdpa_case(1, 2, 2, sq, 45, 16, 16);
    SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
    SdpaTensors t(c, seed);
    std::mt19937_64 rng(seed);
    std::vector<float> storage(size_t(c.H * c.Sk * c.Sq));
    for (float& x : storage) x = std::uniform_real_distribution<float>(-3, 3)(rng);
    attention::MaskOptions m;
    // Memory order [H, Sk, Sq]: Sq is the innermost in memory.
    m.additive_mask = attention::TensorView::strided(storage.data(), {1, c.H, c.Sq, c.Sk},
                                                     {0, c.Sk * c.Sq, 1, c.Sq});
    run_and_compare(c, t.q.view(), t.k.view(), t.v.view(), t.out, t.lse, m);
  }
}

// A NaN in q at a row that sees keys makes that row NaN, masked or not (Halide's float math has no
// NaN semantics, and a "sum == 0: fully masked" test once turned such a row into zeros).
TEST(MaskedSdpa, NaNInAVisibleQueryRowPropagates) {
  const uint64_t seed = seed_for_current_test();
  for (int64_t sq : {1, 2, 60}) {  // decode and prefill
    SdpaCase c = sdpa_case(1, 2, 1, sq, 70, 16, 8).with_logsumexp();
    MaskSpec m;
    m.causal = Causal::BottomRight;  // every row sees keys
    SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
    SdpaTensors t(c, seed);
    const attention::TensorView q = t.q.view();
    const int64_t row = sq / 2;
    static_cast<float*>(q.data)[q.strides[1] + row * q.strides[2] + 3 * q.strides[3]] = NAN;
    MaskTensors masks(m, c, seed);
    run_and_compare(c, t.q.view(), t.k.view(), t.v.view(), t.out, t.lse, masks.options);
    const std::vector<float> out = t.out.to_dense();
    for (int64_t col = 0; col < c.Dv; ++col) {
      EXPECT_TRUE(std::isnan(out[(c.Sq + row) * c.Dv + col])) << "head 1, row " << row;
    }
  }
}

// NaN in k and v at keys no row can see (padding beyond key_lengths, keys after the causal limit,
// a column the boolean mask hides everywhere) must not reach any output.
TEST(MaskedSdpa, NaNAtHiddenKeysDoesNotLeak) {
  const uint64_t seed = seed_for_current_test();
  for (int64_t sq : {1, 2, 50}) {
    SdpaCase c = sdpa_case(2, 2, 1, sq, 64, 16, 16).with_logsumexp();
    SCOPED_TRACE(describe(c) + ", " + seed_note(seed));
    SdpaTensors t(c, seed);
    const int64_t hidden_column = 5;
    std::vector<int32_t> key_lengths = {40, 57};
    auto poison_hidden = [&](const Index& index) {
      const int64_t b = index[0], j = index[2];
      return j >= key_lengths[b] || j == hidden_column;
    };
    std::mt19937_64 rng(seed);
    for (Tensor* kv : {&t.k, &t.v}) {
      kv->fill([&](const Index& index) {
        const float x = std::uniform_real_distribution<float>(-1, 1)(rng);
        return poison_hidden(index) ? std::numeric_limits<float>::quiet_NaN() : x;
      });
    }
    std::vector<uint8_t> allowed(size_t(c.Sq * c.Sk), 1);
    for (int64_t i = 0; i < c.Sq; ++i) allowed[i * c.Sk + hidden_column] = 0;
    attention::MaskOptions m;
    m.causal = Causal::BottomRight;
    m.key_lengths =
        attention::TensorView::contiguous(key_lengths.data(), attention::DType::Int32, {c.B});
    m.bool_mask = attention::TensorView::contiguous(allowed.data(), attention::DType::Bool,
                                                    {1, 1, c.Sq, c.Sk});
    run_and_compare(c, t.q.view(), t.k.view(), t.v.view(), t.out, t.lse, m);
    if (::testing::Test::IsSkipped()) return;  // a GPU backend this machine cannot run
    for (float x : t.out.to_dense()) ASSERT_FALSE(std::isnan(x));
  }
}

// The default ALiBi slopes follow the paper, for power-of-two and other head counts.
TEST(MaskedSdpa, DefaultAlibiSlopes) {
  const std::vector<double> eight = reference_alibi_slopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(eight[h], std::pow(2.0, -(h + 1)));
  const std::vector<double> twelve = reference_alibi_slopes(12);
  ASSERT_EQ(twelve.size(), 12u);
  EXPECT_DOUBLE_EQ(twelve[8], std::pow(2.0, -0.5));
  EXPECT_DOUBLE_EQ(twelve[9], std::pow(2.0, -1.5));
  const uint64_t seed = seed_for_current_test();
  MaskSpec m;
  m.alibi = true;
  for (int64_t heads : {8, 12, 5}) {
    expect_masked_sdpa_matches_reference(sdpa_case(1, heads, 1, 17, 23, 8, 8), m, seed);
  }
}

// Large logits with a softcap stay finite and match; masks + GQA + every layout.
TEST(MaskedSdpa, SoftcapLargeLogitsAndLayouts) {
  const uint64_t seed = seed_for_current_test();
  MaskSpec m;
  m.softcap = 5.0f;
  m.causal = Causal::TopLeft;
  m.key_lengths = true;
  for (Layout layout : kAllLayouts) {
    SdpaCase c = sdpa_case(2, 4, 2, 52, 52, 32, 32).layout(layout).with_scale(3.0f);
    expect_masked_sdpa_matches_reference(c.with_logsumexp(), m, seed);
  }
}

// GQA decode whose group's rows make the decode kernels' row blocks (4 or 8 rows per kv head at
// D = kDecodeRowBlockDim) runs as one head's rows where the mask treats every row alike: groups of
// 4 and 8 at Sq = 1, of 2 and 4 at Sq = 2, MQA, key counts off the block of keys, every layout,
// with no mask, key lengths with softcap, and bottom-right causal (one row: as rows; two rows:
// per head).
TEST(MaskedSdpa, GqaDecodeRowBlockMatchesReference) {
  namespace contract = attention_contract;
  static_assert(contract::kDecodeRowBlockRows[0] == 4 && contract::kDecodeRowBlockRows[1] == 8 &&
                    contract::kDecodeRowBlockDim == 128,
                "the cases below make the row blocks");
  const uint64_t seed = seed_for_current_test();
  MaskSpec lengths;
  lengths.key_lengths = true;
  lengths.softcap = 20.0f;
  MaskSpec causal;
  causal.causal = Causal::BottomRight;
  causal.key_lengths = true;
  for (Layout layout : kAllLayouts) {
    for (const SdpaCase& c : {sdpa_case(2, 8, 2, 1, 301, 128, 96).with_logsumexp(),
                              sdpa_case(1, 4, 2, 2, 130, 128, 128).with_logsumexp(),
                              sdpa_case(1, 4, 1, 1, 77, 128, 128),
                              sdpa_case(1, 16, 2, 1, 203, 128, 128).with_logsumexp(),
                              sdpa_case(2, 8, 2, 2, 150, 128, 96).with_logsumexp(),
                              sdpa_case(1, 8, 1, 1, 66, 128, 128)}) {
      SdpaCase laid_out = c;
      laid_out.layout(layout);
      expect_sdpa_matches_reference(laid_out, seed);
      expect_masked_sdpa_matches_reference(laid_out, lengths, seed);
      expect_masked_sdpa_matches_reference(laid_out, causal, seed);
    }
  }
}

// Pieces of a mask that hide no key are dropped before a kernel runs (without_inert_pieces), each
// exactly at its boundary: one key more and the piece stays.
TEST(MaskedSdpa, InertPiecesAreDroppedAtTheirBoundaries) {
  using attention::MaskOptions;
  using attention::TensorView;
  using attention::detail::without_inert_pieces;
  const auto with = [](Causal causal, int64_t window = -1, int64_t forward = 0) {
    MaskOptions m;
    m.causal = causal;
    m.window = window;
    m.window_forward = forward;
    return m;
  };
  // Causal: row 0's diagonal (+ window_forward) reaches the last key.
  EXPECT_TRUE(without_inert_pieces(with(Causal::BottomRight), 2, 1, 37).empty());
  EXPECT_EQ(without_inert_pieces(with(Causal::BottomRight), 2, 2, 29).causal, Causal::BottomRight);
  EXPECT_TRUE(without_inert_pieces(with(Causal::BottomRight, -1, 1), 2, 2, 29).empty());
  EXPECT_TRUE(without_inert_pieces(with(Causal::TopLeft, -1, 3), 1, 4, 4).empty());
  EXPECT_EQ(without_inert_pieces(with(Causal::TopLeft, -1, 2), 1, 4, 4).causal, Causal::TopLeft);
  // A window: the last row's diagonal minus the window reaches key 0; causal then goes as above.
  EXPECT_TRUE(without_inert_pieces(with(Causal::BottomRight, 36), 2, 1, 37).empty());
  const MaskOptions short_window = without_inert_pieces(with(Causal::BottomRight, 35), 2, 1, 37);
  EXPECT_EQ(short_window.window, 35);
  EXPECT_EQ(short_window.causal, Causal::BottomRight);
  const MaskOptions top_left = without_inert_pieces(with(Causal::TopLeft, 4), 1, 5, 100);
  EXPECT_EQ(top_left.window, -1);
  EXPECT_EQ(top_left.causal, Causal::TopLeft);
  EXPECT_EQ(without_inert_pieces(with(Causal::TopLeft, 3), 1, 5, 100).window, 3);
  // ALiBi measures from the causal diagonal, and from the bottom-right one without causal.
  MaskOptions alibi = with(Causal::TopLeft, -1, 36);
  alibi.alibi = true;
  EXPECT_EQ(without_inert_pieces(alibi, 1, 1, 37).causal, Causal::TopLeft);
  EXPECT_EQ(without_inert_pieces(alibi, 1, 37, 37).causal, Causal::None);
  alibi.causal = Causal::BottomRight;
  const MaskOptions alibi_decode = without_inert_pieces(alibi, 1, 1, 37);
  EXPECT_EQ(alibi_decode.causal, Causal::None);
  EXPECT_TRUE(alibi_decode.alibi);
  // Lengths that are all Sk / Sq, and only those; the other pieces stay.
  std::vector<int32_t> keys = {37, 37}, rows = {3, 3}, short_keys = {37, 36};
  MaskOptions lengths;
  lengths.key_lengths = TensorView::contiguous(keys.data(), attention::DType::Int32, {2});
  lengths.query_lengths = TensorView::contiguous(rows.data(), attention::DType::Int32, {2});
  lengths.softcap = 2.0f;
  const MaskOptions full = without_inert_pieces(lengths, 2, 3, 37);
  EXPECT_EQ(full.key_lengths.data, nullptr);
  EXPECT_EQ(full.query_lengths.data, nullptr);
  EXPECT_EQ(full.softcap, 2.0f);
  EXPECT_FALSE(full.empty());
  lengths.key_lengths.data = short_keys.data();
  EXPECT_EQ(without_inert_pieces(lengths, 2, 3, 37).key_lengths.data, short_keys.data());
  EXPECT_EQ(without_inert_pieces(lengths, 2, 4, 37).query_lengths.data, rows.data());
}

// The same boundaries through the library against the reference: decode, a few rows with GQA at
// D = 128 (the grouped rows' routes take a call whose window or lengths hide nothing), Sq = Sk,
// each with windows and forward reaches one short of, at and past hiding nothing, and full
// lengths.
TEST(MaskedSdpa, InertPiecesMatchReference) {
  const uint64_t seed = seed_for_current_test();
  for (const SdpaCase& c :
       {sdpa_case(2, 8, 2, 1, 37, 16, 16), sdpa_case(1, 4, 2, 2, 29, 8, 12),
        sdpa_case(1, 8, 2, 4, 300, 128, 128), sdpa_case(1, 8, 4, 2, 300, 128, 128),
        sdpa_case(2, 2, 2, 13, 13, 16, 16)}) {
    std::vector<MaskSpec> specs;
    for (const Causal causal : {Causal::TopLeft, Causal::BottomRight}) {
      const int64_t last_diag = causal == Causal::TopLeft ? c.Sq - 1 : c.Sk - 1;
      const int64_t reach = causal == Causal::TopLeft ? c.Sk - 1 : c.Sq - 1;
      MaskSpec m;
      m.causal = causal;
      specs.push_back(m);
      for (const int64_t window : {last_diag - 1, last_diag, last_diag + 5}) {
        m.window = window;
        if (window >= 0) specs.push_back(m);
      }
      m.window = -1;
      for (const int64_t forward : {reach - 1, reach}) {
        m.window_forward = forward;
        if (forward >= 0) specs.push_back(m);
      }
      m.window_forward = reach;
      m.alibi = true;
      specs.push_back(m);
    }
    MaskSpec full;
    full.key_lengths = full.query_lengths = full.full_lengths = true;
    specs.push_back(full);
    full.causal = Causal::BottomRight;
    full.window = c.Sk - 1;
    full.softcap = 3.0f;
    specs.push_back(full);
    for (const MaskSpec& m : specs)
      expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
  }
}

// A bottom-right window runs on the keys after those every row has left behind (key lengths,
// mask tensors and ALiBi follow the cut), and GQA rows or a few rows at D = 128 as one head's rows
// with the keys only some rows see split off (run_grouped_query_rows): windows of 0, a few, a
// third of the keys and all but one, alone and with random key lengths (some ending before the
// cut), mask tensors, ALiBi and a softcap, on decode, GQA rows (groups of 2 and 4, D = 64 and
// 128), a few rows without GQA, and a prefill.
TEST(MaskedSdpa, BottomRightWindowsRunOnTheKeysTheySee) {
  const uint64_t seed = seed_for_current_test();
  for (const SdpaCase& c :
       {sdpa_case(2, 8, 2, 1, 301, 16, 16), sdpa_case(1, 8, 2, 4, 300, 128, 128),
        sdpa_case(2, 4, 4, 3, 200, 128, 64), sdpa_case(1, 8, 4, 2, 900, 128, 128),
        sdpa_case(2, 8, 2, 5, 400, 64, 64), sdpa_case(1, 4, 2, 70, 133, 32, 24)}) {
    for (const int64_t window : {int64_t{0}, int64_t{3}, c.Sk / 3, c.Sk - 2}) {
      MaskSpec m;
      m.causal = Causal::BottomRight;
      m.window = window;
      expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
      m.key_lengths = true;
      expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
      m.bool_mask = m.additive_mask = true;
      expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
      m.bool_mask = m.additive_mask = false;
      m.alibi = true;
      m.softcap = 5.0f;
      expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
    }
  }
}

// Key lengths below the cache's Sk: where the diagonals do not depend on Sk the call runs on the
// keys before the longest length (mask tensors cut alike); bottom-right causal (inert on one row)
// and ALiBi without causal keep every key. Decode with GQA at D = 128, GQA rows, a prefill.
TEST(MaskedSdpa, KeyLengthsBelowTheCacheRunOnTheirKeys) {
  const uint64_t seed = seed_for_current_test();
  for (const SdpaCase& c :
       {sdpa_case(3, 8, 2, 1, 301, 128, 128), sdpa_case(2, 8, 2, 4, 300, 64, 64),
        sdpa_case(2, 4, 2, 70, 133, 32, 24)}) {
    MaskSpec m;
    m.key_lengths = true;
    expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
    m.causal = Causal::TopLeft;
    m.window = 5;
    m.window_forward = 2;
    expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
    m = MaskSpec{};
    m.key_lengths = m.bool_mask = m.additive_mask = true;
    expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
    m = MaskSpec{};
    m.key_lengths = m.alibi = true;
    expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
    m.alibi = false;
    m.causal = Causal::BottomRight;
    expect_masked_sdpa_matches_reference(SdpaCase(c).with_logsumexp(), m, seed);
  }
}

}  // namespace
}  // namespace attention_test
