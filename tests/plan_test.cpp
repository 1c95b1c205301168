// The SDPA, paged and MHA planners (runtime/src/plan/): tables of calls at and on both sides of
// each candidate's thresholds with the plan each must get, explain_sdpa / explain_paged /
// explain_mha agreeing with the planner and with the kernels the call really runs (recorded while
// it runs), and ATTENTION_LOG_PLAN's line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention.h"
#include "call/small_vector.h"
#include "kernels/kernel_slots.h"
#include "kernels/kernel_table.h"
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

// The kernels `call` records while it runs (it must succeed).
std::vector<std::string> recorded_kernels(const std::function<attention::Status()>& call) {
  std::vector<std::string> ran;
  attention::detail::record_kernels(&ran);
  const attention::Status status = call();
  attention::detail::record_kernels(nullptr);
  EXPECT_TRUE(status.ok()) << status.message();
  return ran;
}

// The kernels a call ran against its plan: none for the routes that run none; the plan's first
// kernel where it names one (the conversion kernels around a half route aside); some kernel where
// the route plans its parts.
void expect_plan_ran(const std::string& plan, const std::string& route,
                     const std::vector<std::string>& ran) {
  const size_t at = plan.find(" kernel=");
  if (route == "nothing" || route == "no-keys") {
    EXPECT_TRUE(ran.empty()) << plan;
    return;
  }
  ASSERT_FALSE(ran.empty()) << plan;
  if (at == std::string::npos) return;
  const std::string kernel = plan.substr(at + 8, plan.find(' ', at + 8) - (at + 8));
  for (const std::string& name : ran) {
    if (name.rfind("convert_", 0) == 0) continue;
    EXPECT_EQ(name, kernel) << plan;
  }
}

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
      EXPECT_NE(plan.find(" kernel=" +
                          attention::detail::cpu_sdpa_kernel(false, c.B, c.H, c.Sq, c.Sk, c.D)),
                std::string::npos)
          << plan;
    }
    if (masked && c.contains.find("cut(") == std::string::npos) {
      EXPECT_NE(plan.find(" kernel=" +
                          attention::detail::cpu_sdpa_kernel(true, c.B, c.H, c.Sq, c.Sk, c.D)),
                std::string::npos)
          << plan;
    }
  }
}

// The half routes name the kernel table's half-KV decode and native bf16 prefill kernels, and
// a widened call the fp32 kernel of its rest.
// SmallVector (the inline lists of the plans and checks) against std::vector, inside its inline
// capacity and past it: appends, inserts at the front and in the middle, clear and reuse.
TEST(SdpaPlan, SmallVectorMatchesStdVector) {
  attention::detail::SmallVector<int, 4> small = {1, 2};
  std::vector<int> want = {1, 2};
  for (int round = 0; round < 2; ++round) {
    for (int n = 0; n < 7; ++n) {
      small.push_back(10 + n);
      want.push_back(10 + n);
      small.insert(small.begin(), {-n, -n - 1});
      want.insert(want.begin(), {-n, -n - 1});
      small.insert(small.begin() + small.size() / 2, 100 + n);
      want.insert(want.begin() + static_cast<std::ptrdiff_t>(want.size() / 2), 100 + n);
      ASSERT_EQ(std::vector<int>(small.begin(), small.end()), want) << round << " " << n;
    }
    small.clear();
    want.clear();
    EXPECT_TRUE(small.empty());
  }
}

// The bucket names the tuned lookup uses, made once, are the contract's for shapes at and beside
// every bucket edge.
TEST(SdpaPlan, CachedShapeBucketsAreTheContracts) {
  using namespace attention_contract;
  for (const int64_t Sq : {int64_t{1}, kDecodeMaxQueries, kDecodeMaxQueries + 1, kLongQueries - 1,
                           kLongQueries, int64_t{5000}})
    for (const int64_t Sk : {int64_t{1}, kLongKeys - 1, kLongKeys, int64_t{9999}})
      for (const int64_t D : {int64_t{1}, kSmallHeadDim, kSmallHeadDim + 1, int64_t{256}})
        for (const bool masked : {false, true})
          EXPECT_EQ(attention::detail::shape_bucket_name(Sq, Sk, D, masked),
                    shape_bucket(Sq, Sk, D, masked))
              << Sq << " " << Sk << " " << D << " " << masked;
}

TEST(SdpaPlan, HalfRoutesNameTheirKernels) {
  {
    Operands x(1, 8, 8, 1, 300, 64, false, DType::Float32, DType::Float16);
    std::string plan;
    ASSERT_TRUE(attention::explain_sdpa(x.q, x.k, x.v, x.out, {}, &plan).ok());
    attention::detail::KernelChoice choice;
    const auto* row = attention::detail::half_kv_decode(DType::Float16, DType::Float16, false, 1, 8,
                                                        1, 300, &choice);
    ASSERT_NE(row, nullptr);
    EXPECT_NE(plan.find(std::string(" kernel=") + row->plain.name), std::string::npos) << plan;
  }
  {
    Operands x(1, 8, 8, 300, 500, 64, false, DType::BFloat16, DType::BFloat16);
    std::string plan;
    ASSERT_TRUE(attention::explain_sdpa(x.q, x.k, x.v, x.out, {}, &plan).ok());
    const bool native =
        attention::detail::bf16_prefill_for(DType::BFloat16, DType::BFloat16, DType::BFloat16,
                                            DType::BFloat16, false, 300, 500, 64) != nullptr;
    EXPECT_EQ(plan.find(" half=widened-to-fp32") == std::string::npos, native) << plan;
    if (!native) {
      EXPECT_NE(plan.find(" then: plain backend=cpu kernel=" +
                          attention::detail::cpu_sdpa_kernel(false, 1, 8, 300, 500, 64)),
                std::string::npos)
          << plan;
    }
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
    const std::vector<std::string> ran = recorded_kernels(
        [&] { return attention::scaled_dot_product_attention(x.q, x.k, x.v, x.out, options); });
    expect_plan_ran(plan, c.expected, ran);
    if (c.expected == "decode-as-paged") {
      for (const std::string& name : ran) EXPECT_NE(name.find("paged"), std::string::npos);
    }
  }
}

// A paged call's operands, owned: sequence b's blocks are its own, in order, in a pool of
// [num_blocks, block_size, Hkv, D] (fp32, small finite values); q and out [B, H, Sq, D].
struct PagedOperands {
  PagedOperands(int64_t H, int64_t Hkv, int64_t Sq, int64_t D, int64_t block,
                std::vector<int32_t> seq_lens)
      : lengths(std::move(seq_lens)) {
    const int64_t B = static_cast<int64_t>(lengths.size());
    int64_t width = 1;
    for (int32_t n : lengths) width = std::max<int64_t>(width, (n + block - 1) / block);
    const int64_t blocks = B * width;
    table.resize(static_cast<size_t>(B * width));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (auto* data : {&q_data, &k_data, &v_data}) {
      data->resize(
          static_cast<size_t>(data == &q_data ? B * H * Sq * D : blocks * block * Hkv * D));
      for (float& x : *data) x = value(rng);
    }
    out_data.assign(static_cast<size_t>(B * H * Sq * D), 0.0f);
    q = TensorView::contiguous(q_data.data(), {B, H, Sq, D});
    out = TensorView::contiguous(out_data.data(), {B, H, Sq, D});
    cache.k = TensorView::contiguous(k_data.data(), {blocks, block, Hkv, D});
    cache.v = TensorView::contiguous(v_data.data(), {blocks, block, Hkv, D});
    cache.block_table = TensorView::contiguous(table.data(), DType::Int32, {B, width});
    cache.seq_lens = TensorView::contiguous(lengths.data(), DType::Int32, {B});
  }
  std::vector<float> q_data, k_data, v_data, out_data;
  std::vector<int32_t> lengths, table;
  TensorView q, out;
  attention::PagedKvCache cache;
};

struct PagedPlanCase {
  const char* name;
  int64_t H, Hkv, Sq, D, block;
  std::vector<int32_t> seq_lens;
  std::function<void(SdpaOptions&)> options;  // may be empty
  std::string expected;                       // the route
  std::string contains;                       // a piece the plan must hold ("" for none)
};

std::vector<PagedPlanCase> paged_plan_cases() {
  const auto causal = [](SdpaOptions& o) { o.mask.causal = Causal::BottomRight; };
  const auto window = [](SdpaOptions& o) {
    o.mask.causal = Causal::BottomRight;
    o.mask.window = 20;
  };
  const int64_t rows_keys = attention::detail::kDecodeRowsMinKeys;  // mean keys per sequence
  return {
      {"empty batch", 4, 4, 0, 16, 16, {}, {}, "nothing", ""},
      {"decode", 4, 2, 1, 64, 16, {90, 100}, {}, "kernel", " length_groups=1"},
      {"no keys", 4, 2, 1, 64, 16, {0, 0}, {}, "no-keys", ""},
      {"mixed lengths", 4, 2, 1, 64, 16, {2000, 16, 16, 16}, {}, "kernel", " length_groups=2"},
      // A window that leaves whole blocks behind cuts them, then the rest plans on.
      {"window cut", 4, 2, 1, 64, 16, {300, 200}, window, "kernel", " cut(window)="},
      {"window within a block", 4, 2, 1, 64, 16, {30, 20}, window, "kernel", ""},
      // 2-3 draft rows of a head at D = 128: the decode row blocks, from 128 keys per sequence.
      {"draft rows",
       3,
       3,
       2,
       128,
       16,
       {rows_keys, rows_keys},
       causal,
       "rows-as-decode",
       " rows_per_head="},
      {"draft rows, short", 3, 3, 2, 128, 16, {rows_keys - 1, rows_keys - 1}, causal, "kernel", ""},
      {"draft rows, D 64", 3, 3, 2, 64, 16, {rows_keys, rows_keys}, causal, "kernel", ""},
      // More rows per kv head than the decode row block: copies of the keys, SDPA on them.
      {"chunked prefill", 2, 2, 7, 64, 16, {100, 50}, causal, "copied-keys", ""},
      {"four rows", 2, 2, 4, 64, 16, {100, 50}, causal, "kernel", ""},
  };
}

// Every paged candidate at and on both sides of its threshold; the kernels the call records are
// the plan's where it names one, and some ran where the route plans its parts.
TEST(PagedPlan, TableOfCandidatesAndRecordedKernels) {
  for (const PagedPlanCase& c : paged_plan_cases()) {
    SCOPED_TRACE(c.name);
    PagedOperands x(c.H, c.Hkv, c.Sq, c.D, c.block, c.seq_lens);
    SdpaOptions options;
    if (c.options) c.options(options);
    std::string plan;
    const attention::Status explained =
        attention::explain_paged(x.q, x.cache, x.out, options, &plan);
    ASSERT_TRUE(explained.ok()) << explained.message();
    EXPECT_EQ(route_of(plan), c.expected) << plan;
    if (!c.contains.empty()) {
      EXPECT_NE(plan.find(c.contains), std::string::npos) << plan;
    }
    if (c.contains.find("cut(") == std::string::npos) {
      EXPECT_EQ(plan.find("cut("), std::string::npos) << plan;
    }
    expect_plan_ran(plan, c.expected, recorded_kernels([&] {
                      return attention::paged_attention(x.q, x.cache, x.out, options);
                    }));
  }
}

// explain_paged checks as the call does: the same error, nothing planned.
TEST(PagedPlan, ExplainRefusesWhatTheCallRefuses) {
  PagedOperands x(4, 2, 1, 16, 16, {20, 40});
  x.table[0] = 1000;  // a block id past the pool
  std::string plan = "untouched";
  const attention::Status explained = attention::explain_paged(x.q, x.cache, x.out, {}, &plan);
  const attention::Status called = attention::paged_attention(x.q, x.cache, x.out, {});
  EXPECT_FALSE(explained.ok());
  EXPECT_EQ(explained.message(), called.message());
  EXPECT_EQ(plan, "untouched");
  EXPECT_FALSE(attention::explain_paged(x.q, x.cache, x.out, {}, nullptr).ok());
}

// One multi_head_attention call's operands, owned: x_q [B, Sq, E] and x_kv [B, Sk, E] of `dtype`,
// packed projection weights, out. Values are small and finite.
struct MhaOperands {
  MhaOperands(int64_t B, int64_t Sq, int64_t Sk, int64_t E, DType dtype) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> value(-0.5f, 0.5f);
    const auto fill = [&](std::vector<float>& data, int64_t n) {
      data.resize(static_cast<size_t>(n));
      for (float& x : data) x = value(rng);
    };
    fill(x_q_data, B * Sq * E);
    fill(x_kv_data, B * Sk * E);
    fill(w_in, 3 * E * E);
    fill(w_out, E * E);
    out_data.assign(static_cast<size_t>(B * Sq * E), 0.0f);
    if (dtype != DType::Float32) {  // half x_q and out (x_kv and the weights stay fp32)
      half_q.resize(x_q_data.size());
      half_out.resize(out_data.size());
      TensorView from = TensorView::contiguous(x_q_data.data(), {B, Sq, E});
      x_q = TensorView::contiguous(half_q.data(), dtype, {B, Sq, E});
      EXPECT_TRUE(attention::convert_dtype(from, x_q).ok());
      out = TensorView::contiguous(half_out.data(), dtype, {B, Sq, E});
    } else {
      x_q = TensorView::contiguous(x_q_data.data(), {B, Sq, E});
      out = TensorView::contiguous(out_data.data(), {B, Sq, E});
    }
    x_kv = TensorView::contiguous(x_kv_data.data(), {B, Sk, E});
    weights.in_proj_weight = TensorView::contiguous(w_in.data(), {3 * E, E});
    weights.out_proj_weight = TensorView::contiguous(w_out.data(), {E, E});
  }
  std::vector<float> x_q_data, x_kv_data, w_in, w_out, out_data;
  std::vector<uint16_t> half_q, half_out;
  TensorView x_q, x_kv, out;
  attention::MhaWeights weights;
};

struct MhaPlanCase {
  const char* name;
  int64_t B, Sq, Sk;
  DType dtype;
  std::function<void(attention::MhaOptions&, std::vector<float>&)> options;  // may be empty
  std::string expected;  // the plan's start: route and kernel
};

// Every MHA candidate; explain_mha's plan, and the kernels the call records: the plan's kernel
// first (after the conversions of a widened call), then the weights' kernels where asked for.
TEST(MhaPlan, TableOfCandidatesAndRecordedKernels) {
  const std::string plain = attention::mha_kernel_name(false),
                    masked = attention::mha_kernel_name(true);
  const auto causal = [](attention::MhaOptions& o, std::vector<float>&) {
    o.mask.causal = Causal::BottomRight;
  };
  const auto weights = [](attention::MhaOptions& o, std::vector<float>& storage) {
    storage.assign(2 * 4 * 5 * 7, -1.0f);
    o.attention_weights = TensorView::contiguous(storage.data(), {2, 4, 5, 7});
  };
  const std::vector<MhaPlanCase> cases = {
      {"no rows", 0, 5, 7, DType::Float32, {}, "nothing backend=cpu"},
      {"plain", 2, 5, 7, DType::Float32, {}, "kernel backend=cpu kernel=" + plain},
      {"causal", 2, 5, 7, DType::Float32, causal, "kernel backend=cpu kernel=" + masked},
      // Bottom-right causal hides no key from one query row: the mask goes, the plain kernel runs.
      {"causal decode", 2, 1, 7, DType::Float32, causal, "kernel backend=cpu kernel=" + plain},
      {"no keys", 2, 5, 0, DType::Float32, {}, "no-keys backend=cpu"},
      {"weights", 2, 5, 7, DType::Float32, weights,
       "kernel backend=cpu kernel=" + plain + " attention_weights"},
      {"half",
       2,
       5,
       7,
       DType::BFloat16,
       {},
       "widened backend=cpu then: kernel backend=cpu kernel=" + plain},
  };
  for (const MhaPlanCase& c : cases) {
    SCOPED_TRACE(c.name);
    MhaOperands x(c.B, c.Sq, c.Sk, 16, c.dtype);
    attention::MhaOptions options;
    options.num_heads = 4;
    std::vector<float> storage;
    if (c.options) c.options(options, storage);
    std::string plan;
    const attention::Status explained =
        attention::explain_mha(x.x_q, x.x_kv, x.weights, x.out, options, &plan);
    ASSERT_TRUE(explained.ok()) << explained.message();
    EXPECT_EQ(plan, c.expected);
    std::vector<std::string> ran = recorded_kernels(
        [&] { return attention::multi_head_attention(x.x_q, x.x_kv, x.weights, x.out, options); });
    ran.erase(std::remove_if(ran.begin(), ran.end(),
                             [](const std::string& n) { return n.rfind("convert_", 0) == 0; }),
              ran.end());
    const size_t at = plan.find(" kernel=");
    if (at == std::string::npos) {
      EXPECT_TRUE(ran.empty()) << plan;
      continue;
    }
    ASSERT_FALSE(ran.empty()) << plan;
    EXPECT_EQ(ran[0], plan.substr(at + 8, plan.find(' ', at + 8) - (at + 8)));
    EXPECT_EQ(ran.size() > 1, plan.find("attention_weights") != std::string::npos) << plan;
  }
}

// explain_mha checks as the call does: the same error, nothing planned.
TEST(MhaPlan, ExplainRefusesWhatTheCallRefuses) {
  MhaOperands x(2, 5, 7, 16, DType::Float32);
  attention::MhaOptions options;
  options.num_heads = 3;  // does not divide E = 16
  std::string plan = "untouched";
  const attention::Status explained =
      attention::explain_mha(x.x_q, x.x_kv, x.weights, x.out, options, &plan);
  const attention::Status called =
      attention::multi_head_attention(x.x_q, x.x_kv, x.weights, x.out, options);
  EXPECT_FALSE(explained.ok());
  EXPECT_EQ(explained.message(), called.message());
  EXPECT_EQ(plan, "untouched");
  options.num_heads = 4;
  EXPECT_FALSE(attention::explain_mha(x.x_q, x.x_kv, x.weights, x.out, options, nullptr).ok());
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
