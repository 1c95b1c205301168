// The SDPA planner (runtime/src/plan/sdpa_plan.h): a table of calls at and on both sides of each
// candidate's thresholds with the plan each must get, explain_sdpa agreeing with the planner and
// with the kernel the call really runs (recorded while it runs), and ATTENTION_LOG_PLAN's line.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "plan/sdpa_plan.h"
#include "plan/thresholds.h"

namespace attention_test {
namespace {

using attention::Causal;
using attention::DType;
using attention::SdpaOptions;
using attention::TensorView;

// One call's operands, owned: q, k, v, out of `dtype` (k and v of `kv`), k and v heads-major
// ([B, Hkv, Sk, D]) or sequence-major ([B, Sk, Hkv, D] in memory). Values are small and finite.
struct Operands {
  Operands(int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, bool by_position,
           DType dtype, DType kv)
      : q_data(size(B * H * Sq * D, dtype)),
        k_data(size(B * Hkv * Sk * D, kv)),
        v_data(size(B * Hkv * Sk * D, kv)),
        out_data(size(B * H * Sq * D, dtype)) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (auto* data : {&q_data, &k_data, &v_data}) {
      // Half operands: random bits of small finite values (exponent kept below 1).
      for (float& x : *data)
        x = dtype == DType::Float32 && kv == DType::Float32 ? value(rng) : 0.25f;
    }
    q = TensorView::contiguous(q_data.data(), dtype, {B, H, Sq, D});
    out = TensorView::contiguous(out_data.data(), dtype, {B, H, Sq, D});
    if (by_position) {
      k = TensorView::strided(k_data.data(), kv, {B, Hkv, Sk, D}, {Sk * Hkv * D, D, Hkv * D, 1});
      v = TensorView::strided(v_data.data(), kv, {B, Hkv, Sk, D}, {Sk * Hkv * D, D, Hkv * D, 1});
    } else {
      k = TensorView::contiguous(k_data.data(), kv, {B, Hkv, Sk, D});
      v = TensorView::contiguous(v_data.data(), kv, {B, Hkv, Sk, D});
    }
  }
  // Floats enough for n elements of `dtype` (at least one, so no pointer is null).
  static size_t size(int64_t n, DType dtype) {
    return static_cast<size_t>(std::max<int64_t>(dtype == DType::Float32 ? n : (n + 1) / 2, 1));
  }
  std::vector<float> q_data, k_data, v_data, out_data;
  TensorView q, k, v, out;
  std::vector<int32_t> lengths;
};

struct PlanCase {
  const char* name;
  int64_t B, H, Hkv, Sq, Sk, D;
  bool by_position;
  std::function<void(SdpaOptions&, Operands&)> options;  // masks etc.; may be empty
  std::string expected;                                  // the plan's first word (the route)
  std::string contains;                                  // a piece the plan must hold ("" for none)
  DType dtype = DType::Float32, kv = DType::Float32;
};

void bottom_right(SdpaOptions& o, Operands&) { o.mask.causal = Causal::BottomRight; }
std::function<void(SdpaOptions&, Operands&)> window(int64_t w) {
  return [w](SdpaOptions& o, Operands&) {
    o.mask.causal = Causal::BottomRight;
    o.mask.window = w;
  };
}
std::function<void(SdpaOptions&, Operands&)> key_lengths(std::vector<int32_t> lengths,
                                                         Causal causal = Causal::None) {
  return [lengths, causal](SdpaOptions& o, Operands& x) {
    x.lengths = lengths;
    o.mask.causal = causal;
    o.mask.key_lengths = TensorView::contiguous(x.lengths.data(), DType::Int32,
                                                {static_cast<int64_t>(x.lengths.size())});
  };
}

std::string route_of(const std::string& plan) { return plan.substr(0, plan.find(' ')); }

using attention::detail::kCausalKeysPerQuery;
using attention::detail::kGroupedMaxQueries;
using attention::detail::kPagedDecodeBatchMinKvHeads;
using attention::detail::kPagedDecodeMinKeys;
using attention::detail::kPagedDecodeMinKeysTimesHeads;

std::vector<PlanCase> plan_cases() {
  const int64_t paged_keys = kPagedDecodeMinKeys;
  const int64_t paged_heads = kPagedDecodeMinKeysTimesHeads / kPagedDecodeMinKeys;  // 8
  const int64_t few_heads = kPagedDecodeBatchMinKvHeads;
  std::vector<PlanCase> cases = {
      {"empty batch", 0, 4, 4, 7, 9, 16, false, {}, "nothing", ""},
      {"no keys", 2, 4, 4, 7, 0, 16, false, {}, "no-keys", ""},
      {"plain prefill", 1, 4, 4, 37, 53, 64, false, {}, "plain", " kernel="},
      {"plain decode", 1, 4, 4, 1, 53, 64, false, {}, "plain", " kernel="},
      {"masked", 1, 4, 4, 37, 53, 64, false, bottom_right, "masked", " kernel="},
      // Decode as paged: a sequence-major cache from kPagedDecodeMinKeys keys and
      // kPagedDecodeMinKeysTimesHeads keys times kv heads, or a batch of
      // kPagedDecodeBatchMinKvHeads.
      {"paged: long cache",
       1,
       paged_heads,
       paged_heads,
       1,
       paged_keys,
       64,
       true,
       {},
       "decode-as-paged",
       " block=64"},
      {"paged: one key short",
       1,
       paged_heads,
       paged_heads,
       1,
       paged_keys - 1,
       64,
       true,
       {},
       "plain",
       ""},
      {"paged: heads-major",
       1,
       paged_heads,
       paged_heads,
       1,
       paged_keys,
       64,
       false,
       {},
       "plain",
       ""},
      {"paged: keys x heads",
       1,
       paged_heads / 2,
       paged_heads / 2,
       1,
       2 * paged_keys,
       64,
       true,
       {},
       "decode-as-paged",
       ""},
      {"paged: keys x heads short",
       1,
       paged_heads / 2,
       paged_heads / 2,
       1,
       2 * paged_keys - 1,
       64,
       true,
       {},
       "plain",
       ""},
      {"paged: batch of heads",
       2,
       few_heads,
       few_heads,
       1,
       16,
       64,
       true,
       {},
       "decode-as-paged",
       " block=16"},
      {"paged: batch of fewer heads",
       2,
       few_heads - 1,
       few_heads - 1,
       1,
       16,
       64,
       true,
       {},
       "plain",
       ""},
      {"paged: bottom-right causal", 2, few_heads, few_heads, 1, 16, 64, true, bottom_right,
       "decode-as-paged", ""},
      {"paged: top-left causal", 2, few_heads, few_heads, 1, 16, 64, true,
       [](SdpaOptions& o, Operands&) { o.mask.causal = Causal::TopLeft; }, "masked", ""},
      // Grouped rows (D = 64: no decode row blocks): GQA with kDecodeMaxQueries < Sq <=
      // kGroupedMaxQueries; bottom-right causal from kCausalKeysPerQuery keys per row.
      {"grouped: 3 rows", 1, 8, 2, 3, 100, 64, false, {}, "grouped-rows", " rows=one-head"},
      {"grouped: 2 rows", 1, 8, 2, 2, 100, 64, false, {}, "plain", ""},
      {"grouped: most rows", 1, 8, 2, kGroupedMaxQueries, 100, 64, false, {}, "grouped-rows", ""},
      {"grouped: too many rows", 1, 8, 2, kGroupedMaxQueries + 1, 100, 64, false, {}, "plain", ""},
      {"grouped: no GQA", 1, 8, 8, 4, 100, 64, false, {}, "plain", ""},
      {"grouped: causal", 1, 8, 2, 8, 8 * kCausalKeysPerQuery, 64, false, bottom_right,
       "grouped-rows", ""},
      {"grouped: causal, a key short", 1, 8, 2, 8, 8 * kCausalKeysPerQuery - 1, 64, false,
       bottom_right, "masked", ""},
      // Key cuts.
      {"window cut", 1, 4, 4, 4, 1000, 64, false, window(100), "masked", " cut(window)=[896,1000)"},
      {"window at the edge", 1, 4, 4, 4, 1000, 64, false, window(996), "masked", ""},
      {"window one key short", 1, 4, 4, 4, 1000, 64, false, window(995), "masked",
       " cut(window)=[1,1000)"},
      {"key lengths cut", 2, 4, 4, 9, 1000, 64, false, key_lengths({500, 300}), "masked",
       " cut(key lengths)=[0,500)"},
      {"key lengths cut to plain", 2, 4, 4, 9, 1000, 64, false, key_lengths({500, 500}), "plain",
       " cut(key lengths)=[0,500)"},
      {"key lengths, bottom-right", 2, 4, 4, 9, 1000, 64, false,
       key_lengths({500, 300}, Causal::BottomRight), "masked", ""},
      {"rope", 1, 4, 4, 37, 53, 64, false,
       [](SdpaOptions& o, Operands&) { o.rope = attention::RopeOptions{}; }, "rope", ""},
      // Half precision.
      {"half-KV decode",
       1,
       8,
       8,
       1,
       300,
       64,
       false,
       {},
       "half",
       " half=half-kv-decode",
       DType::Float32,
       DType::Float16},
      {"bf16 prefill",
       1,
       8,
       8,
       300,
       500,
       64,
       false,
       {},
       "half",
       " half=",
       DType::BFloat16,
       DType::BFloat16},
      {"f16 prefill",
       1,
       8,
       8,
       300,
       500,
       64,
       false,
       {},
       "half",
       " half=widened-to-fp32",
       DType::Float16,
       DType::Float16},
  };
  return cases;
}

TEST(SdpaPlan, TableOfCandidates) {
  for (const PlanCase& c : plan_cases()) {
    SCOPED_TRACE(c.name);
    Operands x(c.B, c.H, c.Hkv, c.Sq, c.Sk, c.D, c.by_position, c.dtype, c.kv);
    SdpaOptions options;
    if (c.options) c.options(options, x);
    std::string plan;
    const attention::Status status = attention::explain_sdpa(x.q, x.k, x.v, x.out, options, &plan);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(route_of(plan), c.expected) << plan;
    if (!c.contains.empty()) {
      EXPECT_NE(plan.find(c.contains), std::string::npos) << plan;
    }
    if (c.contains.find("cut(") == std::string::npos) {
      EXPECT_EQ(plan.find("cut("), std::string::npos) << plan;
    }
    // The planner's kernel for the plain and masked routes is the one the kernel table picks.
    const bool masked = c.expected == "masked";
    if (c.expected == "plain" && c.contains.find("cut(") == std::string::npos) {
      EXPECT_NE(plan.find(" kernel=" + attention::sdpa_kernel_name(c.B, c.H, c.Sq, c.Sk, c.D)),
                std::string::npos)
          << plan;
    }
    if (masked && c.contains.find("cut(") == std::string::npos) {
      EXPECT_NE(
          plan.find(" kernel=" + attention::sdpa_kernel_name(c.B, c.H, c.Sq, c.Sk, c.D, true)),
          std::string::npos)
          << plan;
    }
  }
}

// The half routes name the kernels sdpa_kernel_name names for them.
TEST(SdpaPlan, HalfRoutesNameTheirKernels) {
  {
    Operands x(1, 8, 8, 1, 300, 64, false, DType::Float32, DType::Float16);
    std::string plan;
    ASSERT_TRUE(attention::explain_sdpa(x.q, x.k, x.v, x.out, {}, &plan).ok());
    EXPECT_NE(plan.find(" kernel=" +
                        attention::sdpa_kernel_name(1, 8, 1, 300, 64, false, DType::Float16)),
              std::string::npos)
        << plan;
  }
  {
    Operands x(1, 8, 8, 300, 500, 64, false, DType::BFloat16, DType::BFloat16);
    std::string plan;
    ASSERT_TRUE(attention::explain_sdpa(x.q, x.k, x.v, x.out, {}, &plan).ok());
    const std::string kernel =
        attention::sdpa_kernel_name(1, 8, 300, 500, 64, false, DType::BFloat16, DType::BFloat16);
    const bool native = kernel.find("bf16") != std::string::npos;
    EXPECT_EQ(plan.find(" kernel=" + kernel) != std::string::npos, native) << plan;
    EXPECT_EQ(plan.find("half=widened-to-fp32") != std::string::npos, !native) << plan;
  }
}

// explain_sdpa checks as the call does: the same error, nothing planned.
TEST(SdpaPlan, ExplainRefusesWhatTheCallRefuses) {
  Operands x(1, 4, 4, 7, 9, 16, false, DType::Float32, DType::Float32);
  const TensorView bad_k = TensorView::contiguous(x.k_data.data(), {1, 4, 9, 8});
  std::string plan = "untouched";
  const attention::Status explained = attention::explain_sdpa(x.q, bad_k, x.v, x.out, {}, &plan);
  const attention::Status called =
      attention::scaled_dot_product_attention(x.q, bad_k, x.v, x.out, {});
  EXPECT_FALSE(explained.ok());
  EXPECT_EQ(explained.message(), called.message());
  EXPECT_EQ(plan, "untouched");
  EXPECT_FALSE(attention::explain_sdpa(x.q, x.k, x.v, x.out, {}, nullptr).ok());
}

// Every route of the table runs: the kernels the call records are the plan's kernel where the
// plan names one, and some kernel ran where the route plans its parts again.
TEST(SdpaPlan, RecordedKernelsMatchThePlan) {
  for (const PlanCase& c : plan_cases()) {
    SCOPED_TRACE(c.name);
    if (c.expected == "rope") continue;  // needs positions; the rope suites run it
    Operands x(c.B, c.H, c.Hkv, c.Sq, c.Sk, c.D, c.by_position, c.dtype, c.kv);
    SdpaOptions options;
    if (c.options) c.options(options, x);
    std::string plan;
    ASSERT_TRUE(attention::explain_sdpa(x.q, x.k, x.v, x.out, options, &plan).ok());
    std::vector<std::string> ran;
    attention::detail::record_kernels(&ran);
    const attention::Status status =
        attention::scaled_dot_product_attention(x.q, x.k, x.v, x.out, options);
    attention::detail::record_kernels(nullptr);
    ASSERT_TRUE(status.ok()) << status.message();
    const size_t at = plan.find(" kernel=");
    if (c.expected == "nothing" || c.expected == "no-keys") {
      EXPECT_TRUE(ran.empty()) << plan;
    } else if (at != std::string::npos) {
      const std::string kernel = plan.substr(at + 8, plan.find(' ', at + 8) - (at + 8));
      ASSERT_FALSE(ran.empty()) << plan;
      // A half route may convert its operands with the conversion kernels around it.
      for (const std::string& name : ran) {
        if (name.rfind("convert_", 0) == 0) continue;
        EXPECT_EQ(name, kernel) << plan;
      }
    } else {
      EXPECT_FALSE(ran.empty()) << plan;
      if (c.expected == "decode-as-paged") {
        for (const std::string& name : ran) EXPECT_NE(name.find("paged"), std::string::npos);
      }
    }
  }
}

// ATTENTION_LOG_PLAN=1 (tests/CMakeLists.txt runs this test with it): the call's plan on stderr.
TEST(SdpaPlan, LoggedCall) {
  if (!attention::detail::log_plans()) GTEST_SKIP() << "ATTENTION_LOG_PLAN=1 not set";
  Operands x(1, 4, 4, 37, 53, 64, false, DType::Float32, DType::Float32);
  std::string plan;
  ASSERT_TRUE(attention::explain_sdpa(x.q, x.k, x.v, x.out, {}, &plan).ok());
  testing::internal::CaptureStderr();
  ASSERT_TRUE(attention::scaled_dot_product_attention(x.q, x.k, x.v, x.out, {}).ok());
  const std::string logged = testing::internal::GetCapturedStderr();
  EXPECT_EQ(logged, "attention: scaled_dot_product_attention: " + plan + "\n");
}

}  // namespace
}  // namespace attention_test
