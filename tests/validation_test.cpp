// Argument checking of scaled_dot_product_attention (one test per class of bad input: the call
// fails, the message names the argument and what was expected, and no buffer is written), the
// TensorView factories, and the thread-count setting.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention.h"
#include "kernels/halide_view.h"
#include "reference/sdpa_reference.h"
#include "test_util.h"

namespace attention_test {
namespace {

using attention::TensorView;

// A valid problem that each test breaks in one way. The sizes differ from each other so that a
// number in a message identifies the dimension it talks about.
constexpr int64_t kB = 5, kH = 8, kHkv = 4, kSq = 13, kSk = 17, kD = 24, kDv = 10;
// What the outputs hold before the call; a rejected call must leave it bit for bit.
constexpr float kPattern = 7.0f;

class SdpaValidation : public ::testing::Test {
 protected:
  SdpaValidation()
      : q_({kB, kH, kSq, kD}),
        k_({kB, kHkv, kSk, kD}),
        v_({kB, kHkv, kSk, kDv}),
        out_({kB, kH, kSq, kDv}),
        lse_({kB, kH, kSq}) {
    std::mt19937_64 rng(seed_);
    for (Tensor* input : {&q_, &k_, &v_}) input->fill_uniform(rng, -1.0f, 1.0f);
    out_.fill_storage(kPattern);
    lse_.fill_storage(kPattern);
    reset_views();
  }

  void reset_views() {
    q = q_.view(), k = k_.view(), v = v_.view(), out = out_.view();
    options = {};
    options.logsumexp = lse_.view();
  }

  float* storage_of(Tensor& tensor) { return tensor.storage().data(); }

  // Expects the call to fail with a message naming one of `arguments` (e.g. "k:") and containing,
  // for each group of `mentions`, one of its (lower-case) phrases; every buffer must be unchanged.
  void expect_rejected(const std::vector<std::string>& arguments,
                       const std::vector<std::vector<std::string>>& mentions) {
    const std::vector<const Tensor*> buffers = {&q_, &k_, &v_, &out_, &lse_};
    std::vector<std::vector<float>> before;
    for (const Tensor* buffer : buffers) before.push_back(buffer->storage());

    const attention::Status status = attention::scaled_dot_product_attention(q, k, v, out, options);
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), attention::StatusCode::InvalidArgument) << status.message();
    const std::string& message = status.message();
    std::string lower = message;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const auto contains_any = [](const std::string& text, const std::vector<std::string>& phrases) {
      return std::any_of(phrases.begin(), phrases.end(), [&](const std::string& phrase) {
        return text.find(phrase) != std::string::npos;
      });
    };
    EXPECT_TRUE(contains_any(message, arguments))
        << "message does not name the argument: " << message;
    for (const std::vector<std::string>& group : mentions) {
      EXPECT_TRUE(contains_any(lower, group))
          << "message lacks \"" << group.front() << "\": " << message;
    }
    for (size_t i = 0; i < buffers.size(); ++i) {
      EXPECT_TRUE(same_bits(buffers[i]->storage(), before[i])) << "buffer " << i << " was written";
    }
  }

  // The four operands by name, for tests that break each of them the same way.
  std::vector<std::pair<std::string, TensorView*>> operands() {
    return {{"q:", &q}, {"k:", &k}, {"v:", &v}, {"out:", &out}};
  }

  const uint64_t seed_ = seed_for_current_test();  // declared first: the constructor draws from it
  Tensor q_, k_, v_, out_, lse_;
  TensorView q, k, v, out;
  attention::SdpaOptions options;
};

// The baseline must pass, so that each rejection below is due to the one thing its test breaks.
TEST_F(SdpaValidation, ValidProblemIsAccepted) {
  SCOPED_TRACE(seed_note(seed_));
  const attention::Status status = attention::scaled_dot_product_attention(q, k, v, out, options);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(status.code(), attention::StatusCode::Ok);
  EXPECT_TRUE(status.message().empty());
  std::vector<double> reference_out, reference_lse;
  reference_sdpa(q, k, v, 1.0 / std::sqrt(static_cast<double>(kD)), &reference_out, &reference_lse);
  EXPECT_TRUE(matches_reference(out_.to_dense(), reference_out, out_.shape()));
  EXPECT_TRUE(matches_reference(lse_.to_dense(), reference_lse, lse_.shape(), Domain::Log));
}

TEST_F(SdpaValidation, WrongRank) {
  q.rank = 3;
  expect_rejected({"q:"}, {{"4"}});
}

TEST_F(SdpaValidation, BatchOfKDiffersFromQ) {
  k.shape[0] = kB - 1;
  expect_rejected({"k:"}, {{std::to_string(kB)}});
}

TEST_F(SdpaValidation, HeadDimOfKDiffersFromQ) {
  k.shape[3] = kD - 1;
  expect_rejected({"k:"}, {{std::to_string(kD)}});
}

TEST_F(SdpaValidation, KeyLengthOfVDiffersFromK) {
  v.shape[2] = kSk - 1;
  expect_rejected({"v:"}, {{std::to_string(kSk)}});
}

TEST_F(SdpaValidation, KvHeadsOfVDifferFromK) {
  v.shape[1] = kHkv / 2;  // still divides H, so only the mismatch with k is wrong
  expect_rejected({"v:"}, {{std::to_string(kHkv)}});
}

TEST_F(SdpaValidation, OutShapeDiffersFromExpected) {
  const std::pair<int, int64_t> dims_and_expected[] = {{0, kB}, {1, kH}, {2, kSq}, {3, kDv}};
  for (const auto& [dim, expected] : dims_and_expected) {
    SCOPED_TRACE("out dimension " + std::to_string(dim));
    reset_views();
    out.shape[dim] = expected - 1;
    expect_rejected({"out:"}, {{std::to_string(expected)}});
  }
}

TEST_F(SdpaValidation, QueryHeadsNotMultipleOfKvHeads) {
  q.shape[1] = out.shape[1] = 6;
  expect_rejected({"q:", "k:"}, {{"6"}, {std::to_string(kHkv)}});
}

TEST_F(SdpaValidation, NullData) {
  for (const auto& [name, view] : operands()) {
    SCOPED_TRACE(name);
    reset_views();
    view->data = nullptr;
    expect_rejected({name}, {{"null"}});
  }
}

TEST_F(SdpaValidation, InnermostStrideNotOne) {
  for (const auto& [name, view] : operands()) {
    SCOPED_TRACE(name);
    reset_views();
    view->strides[3] =
        2;  // the tensors' trailing guard keeps the widened rows inside the allocation
    expect_rejected({name}, {{"stride"}, {"1"}});
  }
}

TEST_F(SdpaValidation, NegativeSize) {
  k.shape[2] = v.shape[2] = -3;  // equal, so only the sign is wrong
  expect_rejected({"k:"}, {{"-3", "negative", ">= 0"}});
}

TEST_F(SdpaValidation, OutOverlapsQ) {
  for (int64_t offset : {int64_t{0}, int64_t{1000}}) {
    SCOPED_TRACE("out starts at q + " + std::to_string(offset));
    reset_views();
    out.data = storage_of(q_) + offset;
    expect_rejected({"out:"}, {{"overlap", "alias"}});
  }
}

TEST_F(SdpaValidation, OutOverlapsKOrV) {
  out.data = storage_of(k_) + 100;
  expect_rejected({"out:", "k:"}, {{"overlap", "alias"}});
  reset_views();
  v.data = storage_of(out_);  // v is smaller than out, so it lies inside out's storage
  expect_rejected({"out:", "v:"}, {{"overlap", "alias"}});
}

TEST_F(SdpaValidation, OutOverlapsItself) {
  out.strides[1] = 0;  // every head would write the same rows
  expect_rejected({"out:"}, {{"overlap", "alias", "stride"}});
}

TEST_F(SdpaValidation, LogsumexpWrongShape) {
  options.logsumexp.shape[2] = kSq - 1;
  expect_rejected({"logsumexp:"}, {{std::to_string(kSq)}});
  reset_views();
  options.logsumexp.rank = 4;
  options.logsumexp.shape[3] = 1;
  options.logsumexp.strides[3] = 1;
  expect_rejected({"logsumexp:"}, {{"3"}});
}

TEST_F(SdpaValidation, LogsumexpOverlapsOut) {
  options.logsumexp.data = storage_of(out_) + 7;
  expect_rejected({"logsumexp:", "out:"}, {{"overlap", "alias"}});
}

TEST_F(SdpaValidation, NonFiniteScale) {
  for (float scale :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    reset_views();
    options.scale = scale;
    expect_rejected({"scale"}, {{"finite", "nan", "inf"}});
  }
}

// Codes outside the enums (a caller casting an integer) are rejected, not trusted.
TEST_F(SdpaValidation, UnknownDtypeOrDevice) {
  v.dtype = static_cast<attention::DType>(7);
  expect_rejected({"v:"}, {{"dtype", "float32"}});
  reset_views();
  out.device = static_cast<attention::Device>(3);
  expect_rejected({"out:"}, {{"cpu", "device"}});
  reset_views();  // one code on every tensor: they agree, but on no device the library knows
  for (TensorView* t : {&q, &k, &v, &out}) t->device = static_cast<attention::Device>(3);
  expect_rejected({"q:"}, {{"device code 3"}});
}

// The kernels index with 32 bits: a view spanning 2 GiB or more, or a size or stride beyond int32,
// is rejected before anything reads it (so these views need no memory behind them).
TEST_F(SdpaValidation, BeyondThirtyTwoBitIndexing) {
  k.strides[2] = int64_t{1} << 29;  // kSk rows 2^29 floats apart: 2^29 * 16 * 4 bytes
  v.strides[2] = k.strides[2];
  expect_rejected({"k:"}, {{"2 gib", "32"}});
  reset_views();
  q.strides[0] = int64_t{1} << 40;
  expect_rejected({"q:"}, {{"int32"}});
}

TEST(TensorView, FactoriesFillShapeAndStrides) {
  float data[1] = {};
  const TensorView dense = TensorView::contiguous(data, {2, 3, 4, 5});
  EXPECT_EQ(dense.data, data);
  EXPECT_EQ(dense.rank, 4);
  EXPECT_EQ(dense.shape, (std::array<int64_t, 4>{2, 3, 4, 5}));
  EXPECT_EQ(dense.strides, (std::array<int64_t, 4>{60, 20, 5, 1}));
  EXPECT_EQ(dense.numel(), 120);

  const TensorView strided = TensorView::strided(data, {2, 0, 7}, {100, 9, 1});
  EXPECT_EQ(strided.rank, 3);
  EXPECT_EQ(strided.shape[1], 0);
  EXPECT_EQ(strided.strides[0], 100);
  EXPECT_EQ(strided.strides[1], 9);
  EXPECT_EQ(strided.numel(), 0);
}

TEST(SdpaThreads, OneAndTwoThreadsMatchReference) {
  const int default_threads = attention::num_threads();
  EXPECT_GE(default_threads, 1);
  const DefaultThreadsOnExit restore;
  const uint64_t seed = seed_for_current_test();
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    attention::set_num_threads(threads);
    EXPECT_EQ(attention::num_threads(), threads);
    expect_sdpa_matches_reference(sdpa_case(2, 4, 2, 100, 100, 64, 64).with_logsumexp(), seed);
  }
  attention::set_num_threads(0);
  EXPECT_EQ(attention::num_threads(), default_threads);
}

// Mask options: each bad field is named in the error.
TEST_F(SdpaValidation, MaskWindowWithoutCausalOrNegative) {
  options.mask.window = 4;
  expect_rejected({"mask.window"}, {{"causal"}, {"diagonal"}});
  reset_views();
  options.mask.causal = attention::Causal::TopLeft;
  options.mask.window = -2;
  expect_rejected({"mask.window"}, {{">= 0"}});
  reset_views();
  options.mask.causal = attention::Causal::TopLeft;
  options.mask.window_forward = -1;
  expect_rejected({"mask.window_forward"}, {{">= 0"}});
  reset_views();
  options.mask.causal = static_cast<attention::Causal>(7);
  expect_rejected({"mask.causal"}, {{"topleft"}});
}

TEST_F(SdpaValidation, MaskLengthsOutOfRangeOrWrongShape) {
  std::vector<int32_t> lengths(kB, 3);
  lengths[2] = kSk + 1;
  options.mask.key_lengths = TensorView::contiguous(lengths.data(), attention::DType::Int32, {kB});
  expect_rejected({"mask.key_lengths[2]"}, {{"outside [0, sk=17]"}});
  reset_views();
  lengths[2] = -1;
  options.mask.query_lengths =
      TensorView::contiguous(lengths.data(), attention::DType::Int32, {kB});
  expect_rejected({"mask.query_lengths[2]"}, {{"outside [0, sq=13]"}});
  reset_views();
  options.mask.key_lengths =
      TensorView::contiguous(lengths.data(), attention::DType::Int32, {kB - 1});
  expect_rejected({"mask.key_lengths"}, {{"expected shape [b=5]"}});
  reset_views();
  std::vector<float> float_lengths(kB, 1.0f);
  options.mask.key_lengths = TensorView::contiguous(float_lengths.data(), {kB});
  expect_rejected({"mask.key_lengths"}, {{"dtype int32"}});
}

TEST_F(SdpaValidation, MaskTensorsShapeAndDtype) {
  std::vector<uint8_t> allowed(size_t(kB * kH * kSq * kSk), 1);
  options.mask.bool_mask =
      TensorView::contiguous(allowed.data(), attention::DType::Bool, {kB, 2, kSq, kSk});
  expect_rejected({"mask.bool_mask"}, {{"[b|1, h|1, sq, sk] = [5|1, 8|1, 13, 17]"}});
  reset_views();
  options.mask.bool_mask =
      TensorView::contiguous(allowed.data(), attention::DType::Bool, {1, 1, kSk, kSq});
  expect_rejected({"mask.bool_mask"}, {{"got [1, 1, 17, 13]"}});
  reset_views();
  options.mask.additive_mask =
      TensorView::contiguous(allowed.data(), attention::DType::Bool, {1, 1, kSq, kSk});
  expect_rejected({"mask.additive_mask"}, {{"dtype float32"}});
  reset_views();
  options.mask.bool_mask =
      TensorView::contiguous(allowed.data(), attention::DType::Bool, {1, 1, kSq});
  expect_rejected({"mask.bool_mask"}, {{"rank-4"}});
}

TEST_F(SdpaValidation, MaskAlibiAndSoftcap) {
  std::vector<float> slopes(kH, 0.5f);
  options.mask.alibi_slopes = TensorView::contiguous(slopes.data(), {kH});
  expect_rejected({"mask.alibi_slopes"}, {{"mask.alibi is false"}});
  reset_views();
  options.mask.alibi = true;
  options.mask.alibi_slopes = TensorView::contiguous(slopes.data(), {kH - 1});
  expect_rejected({"mask.alibi_slopes"}, {{"expected shape [h=8]"}});
  reset_views();
  slopes[3] = std::numeric_limits<float>::infinity();
  options.mask.alibi = true;
  options.mask.alibi_slopes = TensorView::contiguous(slopes.data(), {kH});
  expect_rejected({"mask.alibi_slopes[3]"}, {{"finite"}});
  for (float cap :
       {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    reset_views();
    options.mask.softcap = cap;
    expect_rejected({"mask.softcap"}, {{"> 0"}});
  }
}

// A mask must not share memory with an output.
TEST_F(SdpaValidation, MaskOverlappingOutput) {
  options.mask.additive_mask =
      TensorView::strided(storage_of(out_), {1, 1, kSq, kSk}, {0, 0, kSk, 1});
  expect_rejected({"out"}, {{"overlaps mask.additive_mask"}});
}

// Status codes let an application react without parsing messages: a Halide allocation failure is
// OutOfMemory, any other kernel error KernelFailure, and an error is never ok.
TEST(StatusCodes, HalideErrorsMapToCodes) {
  using attention::StatusCode;
  EXPECT_EQ(attention::detail::status_code_of_halide_error(halide_error_code_out_of_memory),
            StatusCode::OutOfMemory);
  EXPECT_EQ(attention::detail::status_code_of_halide_error(halide_error_code_device_malloc_failed),
            StatusCode::OutOfMemory);
  EXPECT_EQ(attention::detail::status_code_of_halide_error(halide_error_code_generic_error),
            StatusCode::KernelFailure);
  EXPECT_EQ(attention::detail::status_code_of_halide_error(halide_error_code_bad_type),
            StatusCode::KernelFailure);
  const attention::Status error = attention::Status::error(StatusCode::Ok, "not ok after all");
  EXPECT_FALSE(error.ok());
  EXPECT_EQ(error.code(), StatusCode::KernelFailure);
  EXPECT_EQ(attention::Status::ok_status().code(), StatusCode::Ok);
  EXPECT_STREQ(attention::status_code_name(StatusCode::InvalidArgument), "invalid argument");
  EXPECT_STREQ(attention::status_code_name(StatusCode::BackendUnavailable), "backend unavailable");
  EXPECT_STREQ(attention::status_code_name(StatusCode::OutOfMemory), "out of memory");
}

}  // namespace
}  // namespace attention_test
