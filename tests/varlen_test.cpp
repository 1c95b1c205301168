// scaled_dot_product_attention_varlen: packed batches of sequences of different lengths against the
// double reference run on each sequence's rows, with every mask that has a packed form, on the
// test backend and dtype (the suite name matches the GPU and half filters of tests/CMakeLists).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "random_cases.h"
#include "reference/sdpa_reference.h"
#include "test_util.h"

namespace {

using attention::DType;
using attention::TensorView;
using attention_test::HalfCopy;
using attention_test::Tensor;
using attention_test::uniform;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The masks of a packed call, per sequence where they have lengths.
struct VarlenMasks {
  attention::Causal causal = attention::Causal::None;
  int64_t window = -1;
  bool key_lengths = false, query_lengths = false, alibi = false;
  float softcap = 0.0f;
};

struct VarlenCase {
  std::vector<int64_t> q_lengths, k_lengths;
  int64_t H = 1, Hkv = 1, D = 1, Dv = 1;
  bool fused_qkv = false;  // q, k, v heads of one [T, H + 2·Hkv, D] buffer (needs D == Dv, Tq == Tk)
  bool logsumexp = true;   // false: logsumexp has its shape but no data (skipped)
  VarlenMasks masks;
};

std::string describe(const VarlenCase& c) {
  std::string s = "B=" + std::to_string(c.q_lengths.size()) + " H=" + std::to_string(c.H) + "(" +
                  std::to_string(c.Hkv) + ") D=" + std::to_string(c.D) +
                  " Dv=" + std::to_string(c.Dv) + " lengths q/k:";
  for (size_t b = 0; b < c.q_lengths.size(); ++b)
    s += " " + std::to_string(c.q_lengths[b]) + "/" + std::to_string(c.k_lengths[b]);
  const VarlenMasks& m = c.masks;
  if (m.causal != attention::Causal::None)
    s += m.causal == attention::Causal::TopLeft ? " causal top-left" : " causal bottom-right";
  if (m.window >= 0) s += " window " + std::to_string(m.window);
  if (m.key_lengths) s += " key lengths";
  if (m.query_lengths) s += " query lengths";
  if (m.alibi) s += " alibi";
  if (m.softcap > 0) s += " softcap";
  if (!c.logsumexp) s += " logsumexp without data";
  return s + (c.fused_qkv ? " fused qkv" : "");
}

std::vector<int32_t> prefix_sums(const std::vector<int64_t>& lengths) {
  std::vector<int32_t> cu = {0};
  for (int64_t n : lengths) cu.push_back(static_cast<int32_t>(cu.back() + n));
  return cu;
}

// A packed [T, H, X] view as sequence rows [row, row + S) in the [1, H, S, X] view reference_sdpa
// reads (written out here, independently of the library's slicing).
TensorView sequence_view(const TensorView& t, int64_t row, int64_t S) {
  TensorView view = t;
  // In bytes: the view may be of a half copy (2-byte elements).
  const int64_t bytes = t.dtype == DType::Float16 || t.dtype == DType::BFloat16 ? 2 : 4;
  view.data = static_cast<char*>(t.data) + row * t.strides[0] * bytes;
  view.rank = 4;
  view.shape = {1, t.shape[1], S, t.shape[2]};
  view.strides = {0, t.strides[1], t.strides[0], t.strides[2]};
  return view;
}

// The packed tensors of a case and the library's call on them.
class VarlenRun {
 public:
  VarlenRun(const VarlenCase& c, uint64_t seed) : c_(c) {
    std::mt19937_64 rng(seed);
    for (int64_t n : c.q_lengths) Tq_ += n;
    for (int64_t n : c.k_lengths) Tk_ += n;
    if (c.fused_qkv) {
      qkv_.emplace(std::vector<int64_t>{Tq_, c.H + 2 * c.Hkv, c.D});
      qkv_->fill_uniform(rng, -1.0f, 1.0f);
      const TensorView all = qkv_->view();
      q_ = heads(all, 0, c.H);
      k_ = heads(all, c.H, c.Hkv);
      v_ = heads(all, c.H + c.Hkv, c.Hkv);
    } else {
      q_tensor_.emplace(std::vector<int64_t>{Tq_, c.H, c.D}, attention_test::Layout::kPadded);
      k_tensor_.emplace(std::vector<int64_t>{Tk_, c.Hkv, c.D});
      v_tensor_.emplace(std::vector<int64_t>{Tk_, c.Hkv, c.Dv}, attention_test::Layout::kPadded);
      q_tensor_->fill_uniform(rng, -1.0f, 1.0f);
      k_tensor_->fill_uniform(rng, -1.0f, 1.0f);
      v_tensor_->fill_values(rng);
      q_ = q_tensor_->view();
      k_ = k_tensor_->view();
      v_ = v_tensor_->view();
    }
    out_.emplace(std::vector<int64_t>{Tq_, c.H, c.Dv}, attention_test::Layout::kPadded);
    lse_.assign(static_cast<size_t>(c.H * Tq_ + 1), kNaN);
    cu_q_ = prefix_sums(c.q_lengths);
    cu_k_ = prefix_sums(c.k_lengths);
    const int64_t B = static_cast<int64_t>(c.q_lengths.size());
    std::uniform_int_distribution<int64_t> any;
    attention::MaskOptions& m = options_.mask;
    m.causal = c.masks.causal;
    m.window = c.masks.window;
    m.alibi = c.masks.alibi;
    m.softcap = c.masks.softcap;
    for (int64_t b = 0; b < B; ++b) {
      key_lengths_.push_back(int32_t(any(rng) % (c.k_lengths[b] + 1)));
      query_lengths_.push_back(int32_t(any(rng) % (c.q_lengths[b] + 1)));
    }
    if (c.masks.key_lengths)
      m.key_lengths = TensorView::contiguous(key_lengths_.data(), DType::Int32, {B});
    if (c.masks.query_lengths)
      m.query_lengths = TensorView::contiguous(query_lengths_.data(), DType::Int32, {B});
    options_.backend = attention_test::test_backend();
    options_.logsumexp = TensorView::contiguous(c.logsumexp ? lse_.data() : nullptr, {c.H, Tq_});
  }

  TensorView q() const { return q_; }
  TensorView k() const { return k_; }
  TensorView v() const { return v_; }
  Tensor& out() { return *out_; }
  TensorView cu_q() { return TensorView::contiguous(cu_q_.data(), DType::Int32, {int64_t(cu_q_.size())}); }
  TensorView cu_k() { return TensorView::contiguous(cu_k_.data(), DType::Int32, {int64_t(cu_k_.size())}); }
  attention::SdpaOptions& options() { return options_; }
  const std::vector<float>& lse() const { return lse_; }

  // Runs the library in the test dtype and checks every sequence against the reference.
  void run_and_compare() {
    const DType dtype = attention_test::test_dtype();
    out_->poison();
    std::fill(lse_.begin(), lse_.end(), kNaN);
    std::optional<HalfCopy> hq, hk, hv, hout;
    TensorView q = q_, k = k_, v = v_, out = out_->view();
    if (dtype != DType::Float32) {
      hq.emplace(q_, dtype);
      hk.emplace(k_, dtype);
      hv.emplace(v_, dtype);
      hout.emplace(out, dtype);
      q = hq->view();
      k = hk->view();
      v = hv->view();
      out = hout->view();
    }
    options_.gpu = gpu_options();
    const attention::Status status =
        attention::scaled_dot_product_attention_varlen(q, k, v, out, cu_q(), cu_k(), options_);
    ASSERT_TRUE(status.ok()) << status.message();
    if (hout) hout->write_back();
    EXPECT_TRUE(out_->outside_view_holds(kNaN)) << "in out's padding";

    // The reference, sequence by sequence, on the values the call read (rounded to the dtype).
    const TensorView rq = hq ? hq->rounded() : q_, rk = hk ? hk->rounded() : k_,
                     rv = hv ? hv->rounded() : v_;
    const int64_t H = c_.H, Dv = c_.Dv;
    std::vector<double> expected(static_cast<size_t>(Tq_ * H * Dv)), naive = expected;
    std::vector<double> expected_lse(static_cast<size_t>(H * Tq_));
    bool bf16_weights = false;
    for (size_t b = 0; b < c_.q_lengths.size(); ++b) {
      const int64_t Sq = c_.q_lengths[b], Sk = c_.k_lengths[b];
      if (Sq == 0) continue;
      attention::MaskOptions mask = options_.mask;
      if (c_.masks.key_lengths)
        mask.key_lengths = TensorView::contiguous(&key_lengths_[b], DType::Int32, {1});
      if (c_.masks.query_lengths)
        mask.query_lengths = TensorView::contiguous(&query_lengths_[b], DType::Int32, {1});
      const TensorView sq = sequence_view(rq, cu_q_[b], Sq), sk = sequence_view(rk, cu_k_[b], Sk),
                       sv = sequence_view(rv, cu_k_[b], Sk);
      std::vector<double> seq_out, seq_lse, seq_naive;
      const attention::MaskOptions* m = mask.empty() ? nullptr : &mask;
      reference_sdpa(sq, sk, sv, 1.0 / std::sqrt(double(c_.D)), &seq_out, &seq_lse, m);
      seq_naive = seq_out;
      if (dtype == DType::BFloat16 && Sk > 0 &&
          attention_test::native_bf16_weights(sequence_view(hq->view(), cu_q_[b], Sq),
                                              sequence_view(hk->view(), cu_k_[b], Sk),
                                              sequence_view(hv->view(), cu_k_[b], Sk), dtype,
                                              mask) == DType::BFloat16) {
        reference_sdpa(sq, sk, sv, 1.0 / std::sqrt(double(c_.D)), &seq_naive, nullptr, m,
                       DType::BFloat16);
        bf16_weights = true;
      }
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Sq; ++i) {
          expected_lse[h * Tq_ + cu_q_[b] + i] = seq_lse[h * Sq + i];
          for (int64_t d = 0; d < Dv; ++d) {
            const size_t at = static_cast<size_t>(((cu_q_[b] + i) * H + h) * Dv + d);
            expected[at] = seq_out[(h * Sq + i) * Dv + d];
            naive[at] = seq_naive[(h * Sq + i) * Dv + d];
          }
        }
    }
    const std::vector<int64_t> shape = {Tq_, H, Dv};
    if (dtype == DType::Float32) {
      EXPECT_TRUE(attention_test::matches_reference(out_->to_dense(), expected, shape)) << "in out";
    } else {
      EXPECT_TRUE(attention_test::matches_half_reference(out_->to_dense(), expected, shape, dtype,
                                                         bf16_weights ? &naive : nullptr))
          << "in out";
    }
    if (c_.logsumexp) {
      const std::vector<float> lse(lse_.begin(), lse_.end() - 1);
      EXPECT_TRUE(attention_test::matches_reference(lse, expected_lse, {H, Tq_},
                                                    attention_test::Domain::Log))
          << "in logsumexp";
      EXPECT_TRUE(std::isnan(lse_.back())) << "logsumexp written past [H, Tq]";
    } else {
      EXPECT_TRUE(std::all_of(lse_.begin(), lse_.end(), [](float x) { return std::isnan(x); }));
    }
  }

 private:
  static TensorView heads(const TensorView& t, int64_t first, int64_t count) {
    TensorView view = t;
    view.data = static_cast<float*>(t.data) + first * t.strides[1];
    view.shape[1] = count;
    return view;
  }

  // On a GPU backend, the least workspace that every sequence's call accepts (so the longest
  // runs in chunks); on the CPU the default.
  attention::GpuOptions gpu_options() const {
    const attention::Backend backend = attention_test::test_backend();
    attention::GpuOptions gpu;
    if (backend == attention::Backend::CPU || backend == attention::Backend::Auto) return gpu;
    for (size_t b = 0; b < c_.q_lengths.size(); ++b) {
      if (c_.q_lengths[b] == 0 || c_.k_lengths[b] == 0) continue;
      gpu.workspace_limit = std::max(
          gpu.workspace_limit,
          attention_test::smallest_gpu_workspace(backend, c_.H / c_.Hkv, c_.q_lengths[b],
                                                 c_.k_lengths[b], c_.Dv,
                                                 !options_.mask.empty()));
    }
    return gpu;
  }

  VarlenCase c_;
  int64_t Tq_ = 0, Tk_ = 0;
  std::optional<Tensor> qkv_, q_tensor_, k_tensor_, v_tensor_, out_;
  TensorView q_, k_, v_;
  std::vector<float> lse_;
  std::vector<int32_t> cu_q_, cu_k_, key_lengths_, query_lengths_;
  attention::SdpaOptions options_;
};

void expect_varlen_matches_reference(const VarlenCase& c) {
  if (attention_test::skip_unless_backend_available()) return;
  const uint64_t seed = attention_test::seed_for_current_test();
  SCOPED_TRACE(describe(c) + ", " + attention_test::seed_note(seed));
  VarlenRun run(c, seed);
  run.run_and_compare();
}

// Lengths 0, 1, primes and a decode row among longer prefills; keys at least the queries
// (a KV cache ahead of the new tokens) unless `same`.
VarlenCase mixed_case(bool same) {
  VarlenCase c;
  c.q_lengths = {7, 0, 1, 67, 13, 1, 2};
  c.k_lengths = same ? c.q_lengths : std::vector<int64_t>{7, 5, 40, 67, 0, 131, 9};
  if (!same) c.q_lengths[4] = 0;  // a sequence without keys has no queries here (see below)
  c.H = 4;
  c.Hkv = 2;
  c.D = 24;
  c.Dv = 20;
  return c;
}

TEST(VarlenSdpa, UnmaskedMatchesReferencePerSequence) {
  expect_varlen_matches_reference(mixed_case(true));
  expect_varlen_matches_reference(mixed_case(false));
}

TEST(VarlenSdpa, FusedQkvBuffer) {
  VarlenCase c;
  c.q_lengths = c.k_lengths = {33, 1, 70, 16};
  c.H = 4;
  c.Hkv = 1;
  c.D = c.Dv = 32;
  c.fused_qkv = true;
  expect_varlen_matches_reference(c);
  c.masks.causal = attention::Causal::TopLeft;
  expect_varlen_matches_reference(c);
}

// Chunked prefill: each sequence's new tokens against its own cache length, aligned bottom-right
// per sequence (a padded batch would need a dense mask for this).
TEST(VarlenSdpa, PerSequenceCacheLengthsBottomRight) {
  VarlenCase c = mixed_case(false);
  c.masks.causal = attention::Causal::BottomRight;
  expect_varlen_matches_reference(c);
  c.masks.alibi = true;
  c.masks.softcap = 5.0f;
  expect_varlen_matches_reference(c);
}

// logsumexp with its shape but no data is skipped (attention.h) in every sequence's call: GQA
// draft rows (the grouped-rows route, whose causal prefix once wrote its logsumexps through it),
// a decode row and a short prefill.
TEST(VarlenSdpa, LogsumexpShapeWithoutDataIsSkipped) {
  VarlenCase c;
  c.q_lengths = {4, 1, 9};
  c.k_lengths = {96, 50, 20};
  c.H = 8;
  c.Hkv = 2;
  c.D = c.Dv = 32;
  c.logsumexp = false;
  expect_varlen_matches_reference(c);
  c.masks.causal = attention::Causal::BottomRight;
  expect_varlen_matches_reference(c);
}

TEST(VarlenSdpa, WindowAndKeyPadding) {
  VarlenCase c = mixed_case(true);
  c.masks.causal = attention::Causal::TopLeft;
  c.masks.window = 9;
  c.masks.key_lengths = true;
  expect_varlen_matches_reference(c);
  VarlenCase cache = mixed_case(false);
  cache.masks = c.masks;
  cache.masks.causal = attention::Causal::BottomRight;
  cache.masks.query_lengths = true;
  expect_varlen_matches_reference(cache);
}

// A decode batch (one query per sequence): lengths 0, 1 and up to 700 keys (the longest a
// sequence-major cache the CPU runs through the paged kernel, detail::run_decode_as_paged), GQA,
// Dv != D; key lengths with causal; a window with ALiBi and a softcap (no key lengths).
TEST(VarlenSdpa, DecodeBatchOfOneQueryPerSequence) {
  VarlenCase c;
  c.k_lengths = {300, 0, 1, 77, 700, 129};
  c.q_lengths.assign(c.k_lengths.size(), 1);
  c.H = 8;
  c.Hkv = 2;
  c.D = 64;
  c.Dv = 48;
  expect_varlen_matches_reference(c);
  c.masks.causal = attention::Causal::BottomRight;
  c.masks.key_lengths = true;
  expect_varlen_matches_reference(c);
  c.masks.key_lengths = false;
  c.masks.window = 50;
  c.masks.alibi = true;
  c.masks.softcap = 4.0f;
  expect_varlen_matches_reference(c);
}

TEST(VarlenSdpa, SequencesWithoutKeysOutputZeros) {
  if (attention_test::skip_unless_backend_available()) return;
  VarlenCase c;
  c.q_lengths = {3, 2, 5};
  c.k_lengths = {0, 9, 0};
  c.H = c.Hkv = 2;
  c.D = c.Dv = 8;
  expect_varlen_matches_reference(c);
}

TEST(VarlenSdpa, EmptyBatchAndNoTokens) {
  VarlenCase c;
  c.H = c.Hkv = 1;
  c.D = c.Dv = 4;
  expect_varlen_matches_reference(c);  // B = 0
  c.q_lengths = {0, 0};
  c.k_lengths = {3, 0};
  expect_varlen_matches_reference(c);  // Tq = 0
}

// Random packed batches over the routes a call can take: lengths 0 and 1 among prefills and decode
// rows, sequences with more keys than queries (a cache ahead of the new tokens), GQA, D = 128 and
// odd sizes, a fused QKV buffer, and every mask with a packed form. ATTENTION_VARLEN_CASES=N runs N
// (default 4; a long mode, docs/testing.md, "Reliability").
TEST(VarlenSdpa, RandomBatches) {
  std::mt19937_64 rng(attention_test::seed_for_current_test());
  const int cases = attention_test::random_case_count("ATTENTION_VARLEN_CASES", 4);
  for (int n = 0; n < cases; ++n) {
    VarlenCase c;
    c.Hkv = uniform(rng, 1, 3);
    c.H = c.Hkv * (int64_t{1} << uniform(rng, 0, 2));
    c.D = uniform(rng, 0, 2) ? 128 : uniform(rng, 0, 1) ? 64 : uniform(rng, 1, 130);
    c.Dv = uniform(rng, 0, 3) ? c.D : uniform(rng, 1, 130);
    c.fused_qkv = c.D == c.Dv && uniform(rng, 0, 4) == 0;
    const int64_t longest = uniform(rng, 0, 1) ? 300 : 40;
    for (int64_t b = uniform(rng, 1, 6); b > 0; --b) {
      const int64_t keys = uniform(rng, 0, 4) == 0 ? uniform(rng, 0, 2) : uniform(rng, 0, longest);
      const int64_t kind = uniform(rng, 0, 2);  // decode row, a few draft rows, a prefill chunk
      const int64_t queries = c.fused_qkv ? keys
                              : keys == 0 ? 0
                              : kind == 0 ? 1
                              : kind == 1 ? std::min<int64_t>(keys, uniform(rng, 2, 5))
                                          : uniform(rng, 0, keys);
      c.k_lengths.push_back(keys);
      c.q_lengths.push_back(queries);
    }
    const int64_t causal = uniform(rng, 0, 2);
    c.masks.causal = causal == 0   ? attention::Causal::None
                     : causal == 1 ? attention::Causal::TopLeft
                                   : attention::Causal::BottomRight;
    if (c.masks.causal != attention::Causal::None && uniform(rng, 0, 2) == 0)
      c.masks.window = uniform(rng, 0, 60);
    c.masks.key_lengths = uniform(rng, 0, 3) == 0;
    c.masks.query_lengths = uniform(rng, 0, 3) == 0;
    c.masks.alibi = uniform(rng, 0, 4) == 0;
    if (uniform(rng, 0, 4) == 0) c.masks.softcap = 20.0f;
    c.logsumexp = uniform(rng, 0, 5) != 0;
    expect_varlen_matches_reference(c);
  }
}

// Bad arguments: a clear error naming the argument (and the sequence), nothing written.
class VarlenValidation : public ::testing::Test {
 protected:
  // Host tensors on the CPU, whatever backend the suite runs on elsewhere.
  VarlenValidation() : run_(base_case(), 1) {
    run_.out().poison();
    run_.options().backend = attention::Backend::CPU;
  }
  static VarlenCase base_case() {
    VarlenCase c;
    c.q_lengths = {2, 3};
    c.k_lengths = {4, 3};
    c.H = 2;
    c.Hkv = 1;
    c.D = c.Dv = 8;
    return c;
  }
  void expect_error(const TensorView& cu_q, const TensorView& cu_k, const std::string& needle,
                    attention::StatusCode code = attention::StatusCode::InvalidArgument) {
    const attention::Status status = attention::scaled_dot_product_attention_varlen(
        run_.q(), run_.k(), run_.v(), run_.out().view(), cu_q, cu_k, run_.options());
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), code) << status.message();
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
    for (float x : run_.out().storage()) ASSERT_TRUE(std::isnan(x)) << "out was written";
    for (float x : run_.lse()) ASSERT_TRUE(std::isnan(x)) << "logsumexp was written";
  }
  VarlenRun run_;
};

TEST_F(VarlenValidation, BadPrefixSums) {
  std::vector<int32_t> cu = {1, 2, 5}, down = {0, 3, 2}, short_end = {0, 2, 4}, ok = {0, 2, 5};
  std::vector<int32_t> ok_k = {0, 4, 7}, two = {0, 7};
  auto view = [](std::vector<int32_t>& x) {
    return TensorView::contiguous(x.data(), DType::Int32, {int64_t(x.size())});
  };
  expect_error(view(cu), view(ok_k), "cu_seqlens_q[0] must be 0");
  expect_error(view(down), view(ok_k), "cu_seqlens_q[2] = 2 is less than cu_seqlens_q[1] = 3");
  expect_error(view(short_end), view(ok_k), "cu_seqlens_q[B] = 4 must equal Tq = 5");
  expect_error(view(ok), view(two), "cu_seqlens_k: expected shape [B + 1] = [3]");
  std::vector<float> floats = {0, 2, 5};
  expect_error(TensorView::contiguous(floats.data(), {3}), view(ok_k), "cu_seqlens_q");
}

TEST_F(VarlenValidation, LengthsBeyondTheirSequence) {
  std::vector<int32_t> cu_q = {0, 2, 5}, cu_k = {0, 4, 7}, key_lengths = {4, 4};
  auto view = [](std::vector<int32_t>& x) {
    return TensorView::contiguous(x.data(), DType::Int32, {int64_t(x.size())});
  };
  run_.options().mask.key_lengths = view(key_lengths);
  expect_error(view(cu_q), view(cu_k), "mask.key_lengths[1] = 4 is outside [0, Sk=3] of sequence 1");
}

TEST_F(VarlenValidation, MaskTensorsAreRefused) {
  std::vector<int32_t> cu_q = {0, 2, 5}, cu_k = {0, 4, 7};
  std::vector<uint8_t> bools(2 * 2 * 5 * 7, 1);
  run_.options().mask.bool_mask = TensorView::contiguous(bools.data(), DType::Bool, {2, 2, 5, 7});
  expect_error(TensorView::contiguous(cu_q.data(), DType::Int32, {3}),
               TensorView::contiguous(cu_k.data(), DType::Int32, {3}), "mask.bool_mask",
               attention::StatusCode::Unsupported);
}

TEST_F(VarlenValidation, PerSequenceErrorsNameTheSequence) {
  // A window needs a causal diagonal: scaled_dot_product_attention's own check, made for each
  // sequence's call before any runs.
  std::vector<int32_t> cu_q = {0, 2, 5}, cu_k = {0, 4, 7};
  run_.options().mask.window = 3;
  expect_error(TensorView::contiguous(cu_q.data(), DType::Int32, {3}),
               TensorView::contiguous(cu_k.data(), DType::Int32, {3}), "sequence 0");
}

}  // namespace
