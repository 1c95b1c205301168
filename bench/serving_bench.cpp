// The serving paths (issue 21) in sdpa_bench's run, each beside the call a user makes without it:
//   - varlen/packed: a packed batch of sequences with lengths drawn from [16, 2048]
//     (scaled_dot_product_attention_varlen), against varlen/padded: the same tokens padded to the
//     longest sequence as one [B, H, S_max, D] call with key and query lengths. GFLOP/s counts the
//     sequences' own pairs (causal: the visible ones) for both, so the ratio is the time ratio;
//   - paged/bs<N>: decode over a paged KV cache (paged_attention, blocks of N positions in
//     shuffled order; rows of 4 and 16 queries too, bottom-right causal: draft tokens or a short
//     prefill chunk) against paged/contiguous: the same keys as [B, Hkv, S, D] tensors
//     (scaled_dot_product_attention). Both rotate through copies of their KV, 256 MiB or more in
//     all, so no call finds it in L3; GB/s counts the K and V bytes read. paged/bs<N>_heads_slots:
//     the same pool as [blocks, Hkv, N, D] (PagedKvLayout::BlocksHeadsSlots);
//     paged/contiguous_bshd: the contiguous call over the same keys as [B, S, Hkv, D] tensors
//     (FlashAttention's KV cache layout), which the CPU runs through the paged kernel;
//   - rope/apply: apply_rotary_embedding alone (GB/s of x read and out written), and
//     rope/separate_pass: rotating q and k, then SDPA, against rope/sdpa_alone: the same SDPA on
//     already rotated q and k (what RoPE adds to a prefill call when it is a separate pass), and
//     rope/fused: the call with SdpaOptions::rope (the rotation inside the prefill kernel), its
//     output checked against the separate pass's;
//   - window/masked: a bottom-right sliding window over a longer cache, against
//     window/keys_it_sees: the same rows over the window's keys alone (see run_window).
// Every output is checked once against the other's before timing.
#include <attention/attention.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"

namespace {

[[noreturn]] void fail(const std::string& message) { bench::fail("sdpa_bench", message); }

struct VarlenShape {
  int64_t batch, heads, d;
  bool causal;
};

const VarlenShape kVarlenShapes[] = {{8, 8, 64, false}, {8, 8, 64, true}};

std::string varlen_name(const VarlenShape& s) {
  return std::to_string(s.batch) + "x" + std::to_string(s.heads) + "x[16,2048]x" +
         std::to_string(s.d) + (s.causal ? "_causal" : "");
}

// One batch: the lengths (fixed seed), the packed tensors and their padded twins.
struct VarlenProblem {
  std::vector<int32_t> lengths, cu;
  int64_t tokens = 0, longest = 0;
  std::vector<float> q, k, v;              // packed [T, H, D]
  std::vector<float> pq, pk, pv;           // padded [B, H, S_max, D]
  double flops = 0;                        // the sequences' own (visible) pairs, 4·D each
};

VarlenProblem make_varlen(const VarlenShape& s) {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int32_t> length(16, 2048);
  VarlenProblem p;
  p.cu.push_back(0);
  for (int64_t b = 0; b < s.batch; ++b) {
    const int32_t n = length(rng);
    p.lengths.push_back(n);
    p.cu.push_back(p.cu.back() + n);
    p.longest = std::max<int64_t>(p.longest, n);
    const double pairs = s.causal ? 0.5 * double(n) * (n + 1) : double(n) * n;
    p.flops += 4.0 * s.heads * pairs * s.d;
  }
  p.tokens = p.cu.back();
  const int64_t H = s.heads, D = s.d;
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (auto* t : {&p.q, &p.k, &p.v}) {
    t->resize(static_cast<size_t>(p.tokens * H * D));
    for (float& x : *t) x = value(rng);
  }
  // The padded twins hold the same rows; padding rows are zeros (masked by the lengths).
  for (auto [packed, padded] : {std::pair{&p.q, &p.pq}, {&p.k, &p.pk}, {&p.v, &p.pv}}) {
    padded->assign(static_cast<size_t>(s.batch * H * p.longest * D), 0.0f);
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t i = 0; i < p.lengths[b]; ++i)
        for (int64_t h = 0; h < H; ++h)
          std::copy_n(packed->data() + ((p.cu[b] + i) * H + h) * D, D,
                      padded->data() + ((b * H + h) * p.longest + i) * D);
  }
  return p;
}

attention::SdpaOptions varlen_options(const VarlenShape& s) {
  attention::SdpaOptions options;
  if (s.causal) options.mask.causal = attention::Causal::TopLeft;
  return options;
}

attention::Status run_packed(const VarlenShape& s, VarlenProblem& p, float* out) {
  using attention::TensorView;
  const int64_t T = p.tokens, H = s.heads, D = s.d, cu_size = s.batch + 1;
  return attention::scaled_dot_product_attention_varlen(
      TensorView::contiguous(p.q.data(), {T, H, D}), TensorView::contiguous(p.k.data(), {T, H, D}),
      TensorView::contiguous(p.v.data(), {T, H, D}), TensorView::contiguous(out, {T, H, D}),
      TensorView::contiguous(p.cu.data(), attention::DType::Int32, {cu_size}),
      TensorView::contiguous(p.cu.data(), attention::DType::Int32, {cu_size}), varlen_options(s));
}

attention::Status run_padded(const VarlenShape& s, VarlenProblem& p, float* out) {
  using attention::TensorView;
  const int64_t B = s.batch, H = s.heads, S = p.longest, D = s.d;
  attention::SdpaOptions options = varlen_options(s);
  const TensorView lengths = TensorView::contiguous(p.lengths.data(), attention::DType::Int32, {B});
  options.mask.key_lengths = lengths;
  options.mask.query_lengths = lengths;
  return attention::scaled_dot_product_attention(
      TensorView::contiguous(p.pq.data(), {B, H, S, D}),
      TensorView::contiguous(p.pk.data(), {B, H, S, D}),
      TensorView::contiguous(p.pv.data(), {B, H, S, D}), TensorView::contiguous(out, {B, H, S, D}),
      options);
}

// The packed output against the padded one, row by row (the same kernels' arithmetic up to the
// masked kernel's blocking: a loose bound that still catches a lost row or key).
void check_varlen(const VarlenShape& s, VarlenProblem& p) {
  std::vector<float> packed(p.q.size(), NAN), padded(p.pq.size(), NAN);
  for (const attention::Status& status :
       {run_packed(s, p, packed.data()), run_padded(s, p, padded.data())}) {
    if (!status) fail("varlen/" + varlen_name(s) + ": " + status.message());
  }
  const int64_t H = s.heads, D = s.d;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < p.lengths[b]; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const float a = packed[((p.cu[b] + i) * H + h) * D + d];
          const float e = padded[((b * H + h) * p.longest + i) * D + d];
          if (!(std::fabs(a - e) <= 1e-4f))
            fail("varlen/" + varlen_name(s) + ": packed and padded outputs differ at sequence " +
                 std::to_string(b) + " row " + std::to_string(i));
        }
}

VarlenProblem& varlen_problem(const VarlenShape& s) {
  static std::vector<std::pair<std::string, VarlenProblem>> problems;
  for (auto& [name, p] : problems)
    if (name == varlen_name(s)) return p;
  problems.emplace_back(varlen_name(s), make_varlen(s));
  check_varlen(s, problems.back().second);
  return problems.back().second;
}

void run_varlen(benchmark::State& state, const VarlenShape& s, bool packed) {
  VarlenProblem& p = varlen_problem(s);
  std::vector<float> out(packed ? p.q.size() : p.pq.size());
  bool all_ok = true;
  for (auto _ : state) {
    all_ok &= (packed ? run_packed(s, p, out.data()) : run_padded(s, p, out.data())).ok();
    benchmark::ClobberMemory();
  }
  if (!all_ok) state.SkipWithError("the call returned an error");
  state.SetLabel(packed ? "varlen" : "padded");
  state.counters["GFLOP/s"] = bench::per_second(p.flops * 1e-9);
  state.counters["tokens"] = double(p.tokens);
  state.counters["S_max"] = double(p.longest);
}

void BM_VarlenPacked(benchmark::State& state, VarlenShape s) { run_varlen(state, s, true); }
void BM_VarlenPadded(benchmark::State& state, VarlenShape s) { run_varlen(state, s, false); }

struct PagedShape {
  int64_t batch, heads, kv_heads, keys, d;
  bool mixed = false;  // cache lengths drawn from [16, keys] instead of all `keys`
  int64_t rows = 1;    // query rows per sequence (> 1: bottom-right causal, draft tokens)
};

// The last, one short sequence: a paged item covers every head, so only key splits spread it.
// Mixed: a serving batch's sequences of different lengths (against the contiguous call with key
// lengths only: the padded cache a user would otherwise keep). Rows 4 and 16: speculative
// decoding's draft tokens (or a short prefill chunk) against the one-row call of the same cache
// (and 3, 4 and 8 rows without GQA, 2 rows of a pair or a group of 4 query heads per kv head).
// Groups of 8 (1x64(8)): the decode kernels' two blocks of 4 rows.
const PagedShape kPagedShapes[] = {{1, 32, 32, 4096, 128},
                                   {8, 32, 8, 2048, 128},
                                   {1, 32, 8, 512, 128},
                                   {8, 32, 32, 1024, 128, true},
                                   {8, 32, 8, 2048, 128, true},
                                   {1, 32, 8, 4096, 128},
                                   {1, 64, 8, 4096, 128},
                                   {1, 32, 8, 4096, 128, false, 2},
                                   {1, 32, 8, 4096, 128, false, 4},
                                   {1, 32, 8, 4096, 128, false, 16},
                                   {1, 32, 32, 4096, 128, false, 4},
                                   {1, 32, 32, 4096, 128, false, 3},
                                   {1, 32, 32, 4096, 128, false, 8},
                                   {1, 32, 16, 4096, 128, false, 2}};
const int64_t kBlockSizes[] = {16, 64};
constexpr int64_t kSequenceMajor = -2;  // run_paged_bench's block size for paged/contiguous_bshd
constexpr double kPagedRotationBytes = double(int64_t(256) << 20);

std::string paged_name(const PagedShape& s) {
  return std::to_string(s.batch) + "x" + std::to_string(s.heads) + "(" +
         std::to_string(s.kv_heads) + ")x" + std::to_string(s.rows) + "x" + std::to_string(s.keys) +
         "x" + std::to_string(s.d) + (s.mixed ? "/mixed" : "");
}

// Each sequence's cache length (the same every run).
std::vector<int32_t> paged_lengths(const PagedShape& s) {
  std::vector<int32_t> lengths(static_cast<size_t>(s.batch), static_cast<int32_t>(s.keys));
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> length(16, static_cast<int32_t>(s.keys));
  if (s.mixed)
    for (int32_t& n : lengths) n = length(rng);
  return lengths;
}

// The K and V bytes of the sequences' own keys.
double paged_kv_bytes(const PagedShape& s) {
  const std::vector<int32_t> lengths = paged_lengths(s);
  return 2.0 * std::accumulate(lengths.begin(), lengths.end(), 0.0) * s.kv_heads * s.d *
         sizeof(float);
}

// The same keys twice over: `copies` contiguous [B, Hkv, S, D] k/v tensors, and a pool holding
// every copy's blocks in shuffled order with one block table per copy.
struct PagedProblem {
  int copies = 1;
  bool heads_slots = false;  // pool blocks [Hkv, block_size, D] instead of [block_size, Hkv, D]
  std::vector<float> q, k, v;                   // contiguous copies, one after the other
  std::vector<float> pool_k, pool_v;            // [blocks, block_size, Hkv, D] (or heads_slots)
  std::vector<float> seq_k, seq_v;              // copies as [B, S, Hkv, D] (when a row asks)
  std::vector<std::vector<int32_t>> tables;     // per copy: [B, S / block_size]
  std::vector<int32_t> seq_lens;
};

PagedProblem make_paged(const PagedShape& s, int64_t block_size, bool heads_slots) {
  PagedProblem p;
  p.heads_slots = heads_slots;
  p.copies = std::max(2, static_cast<int>(std::ceil(kPagedRotationBytes / paged_kv_bytes(s))));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const int64_t B = s.batch, Hkv = s.kv_heads, S = s.keys, D = s.d;
  const int64_t per_copy = B * Hkv * S * D;
  p.q.resize(static_cast<size_t>(B * s.heads * s.rows * D));
  for (float& x : p.q) x = value(rng);
  p.k.resize(static_cast<size_t>(per_copy));
  p.v.resize(static_cast<size_t>(per_copy));
  for (float& x : p.k) x = value(rng);
  for (float& x : p.v) x = value(rng);
  for (auto* t : {&p.k, &p.v})
    for (int copy = 1; copy < p.copies; ++copy) t->insert(t->end(), t->begin(), t->begin() + per_copy);
  const int64_t width = S / block_size, blocks = p.copies * B * width;
  std::vector<int32_t> ids(static_cast<size_t>(blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  p.pool_k.resize(static_cast<size_t>(blocks * block_size * Hkv * D));
  p.pool_v.resize(p.pool_k.size());
  size_t next = 0;
  for (int copy = 0; copy < p.copies; ++copy) {
    std::vector<int32_t>& table = p.tables.emplace_back(static_cast<size_t>(B * width));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = 0; n < width; ++n) {
        const int32_t id = ids[next++];
        table[b * width + n] = id;
        for (int64_t slot = 0; slot < block_size; ++slot)
          for (int64_t h = 0; h < Hkv; ++h) {
            const int64_t from = ((b * Hkv + h) * S + n * block_size + slot) * D;
            const int64_t to = heads_slots ? ((id * Hkv + h) * block_size + slot) * D
                                           : ((id * block_size + slot) * Hkv + h) * D;
            std::copy_n(&p.k[from], D, &p.pool_k[to]);
            std::copy_n(&p.v[from], D, &p.pool_v[to]);
          }
      }
  }
  p.seq_lens = paged_lengths(s);
  return p;
}

// p.k and p.v's copies once more as [B, S, Hkv, D] (p.seq_k, p.seq_v).
void add_sequence_major(const PagedShape& s, PagedProblem& p) {
  const int64_t B = s.batch, Hkv = s.kv_heads, S = s.keys, D = s.d;
  p.seq_k.resize(p.k.size());
  p.seq_v.resize(p.v.size());
  for (int64_t bc = 0; bc < p.copies * B; ++bc)  // (copy, batch)
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t j = 0; j < S; ++j) {
        const int64_t from = ((bc * Hkv + h) * S + j) * D, to = ((bc * S + j) * Hkv + h) * D;
        std::copy_n(&p.k[from], D, &p.seq_k[to]);
        std::copy_n(&p.v[from], D, &p.seq_v[to]);
      }
}

// `lengths`: with key lengths (the masked decode kernel, the paged kernel's own algorithm).
// `sequence_major`: k and v from p.seq_k and p.seq_v, [B, S, Hkv, D] in memory.
attention::Status run_contiguous(const PagedShape& s, PagedProblem& p, float* out, int copy,
                                 bool lengths = false, bool sequence_major = false) {
  using attention::TensorView;
  const int64_t B = s.batch, H = s.heads, Hkv = s.kv_heads, S = s.keys, D = s.d;
  const int64_t offset = copy * B * Hkv * S * D;
  attention::SdpaOptions options;
  if (s.rows > 1) options.mask.causal = attention::Causal::BottomRight;
  if (lengths)
    options.mask.key_lengths =
        TensorView::contiguous(p.seq_lens.data(), attention::DType::Int32, {B});
  const auto kv = [&](std::vector<float>& contiguous, std::vector<float>& seq) {
    if (!sequence_major) return TensorView::contiguous(contiguous.data() + offset, {B, Hkv, S, D});
    return TensorView::strided(seq.data() + offset, {B, Hkv, S, D}, {S * Hkv * D, D, Hkv * D, 1});
  };
  return attention::scaled_dot_product_attention(
      TensorView::contiguous(p.q.data(), {B, H, s.rows, D}), kv(p.k, p.seq_k), kv(p.v, p.seq_v),
      TensorView::contiguous(out, {B, H, s.rows, D}), options);
}

attention::Status run_paged(const PagedShape& s, int64_t block_size, PagedProblem& p, float* out,
                            int copy) {
  using attention::TensorView;
  const int64_t B = s.batch, H = s.heads, Hkv = s.kv_heads, D = s.d;
  const int64_t blocks = static_cast<int64_t>(p.pool_k.size()) / (block_size * Hkv * D);
  attention::PagedKvCache cache;
  if (p.heads_slots) {
    cache.k = TensorView::contiguous(p.pool_k.data(), {blocks, Hkv, block_size, D});
    cache.v = TensorView::contiguous(p.pool_v.data(), {blocks, Hkv, block_size, D});
    cache.layout = attention::PagedKvLayout::BlocksHeadsSlots;
  } else {
    cache.k = TensorView::contiguous(p.pool_k.data(), {blocks, block_size, Hkv, D});
    cache.v = TensorView::contiguous(p.pool_v.data(), {blocks, block_size, Hkv, D});
  }
  cache.block_table = TensorView::contiguous(p.tables[copy].data(), attention::DType::Int32,
                                             {B, s.keys / block_size});
  cache.seq_lens = TensorView::contiguous(p.seq_lens.data(), attention::DType::Int32, {B});
  attention::SdpaOptions options;
  if (s.rows > 1) options.mask.causal = attention::Causal::BottomRight;
  return attention::paged_attention(TensorView::contiguous(p.q.data(), {B, H, s.rows, D}), cache,
                                    TensorView::contiguous(out, {B, H, s.rows, D}), options);
}

// The statuses of two calls that wrote `contiguous` (the contiguous call) and `other` (`what`),
// then their outputs, the same within 1e-5; fails the run otherwise.
void expect_same_outputs(const PagedShape& s, const std::string& what,
                         const std::vector<float>& contiguous, const std::vector<float>& other,
                         const attention::Status& contiguous_status,
                         const attention::Status& other_status) {
  for (const attention::Status* status : {&contiguous_status, &other_status}) {
    if (!*status) fail("paged/" + paged_name(s) + ": " + status->message());
  }
  for (size_t i = 0; i < contiguous.size(); ++i)
    if (!(std::fabs(contiguous[i] - other[i]) <= 1e-5f))
      fail("paged/" + paged_name(s) + ": " + what + " and contiguous outputs differ at " +
           std::to_string(i));
}

// block_size 0: the contiguous twin, -1 the same with key lengths, kSequenceMajor the same over
// [B, S, Hkv, D] tensors. Problems are built once per block size and layout and checked once.
void run_paged_bench(benchmark::State& state, PagedShape s, int64_t block_size,
                     bool heads_slots = false) {
  static std::vector<std::pair<std::string, PagedProblem>> problems;
  const int64_t layout_block = block_size <= 0 ? kBlockSizes[0] : block_size;
  const std::string key =
      paged_name(s) + "/" + std::to_string(layout_block) + (heads_slots ? "/heads_slots" : "");
  PagedProblem* p = nullptr;
  for (auto& [name, problem] : problems)
    if (name == key) p = &problem;
  if (p == nullptr) {
    problems.clear();  // one shape's copies at a time: they are hundreds of MiB
    problems.emplace_back(key, make_paged(s, layout_block, heads_slots));
    p = &problems.back().second;
    std::vector<float> a(p->q.size(), NAN), b(p->q.size(), NAN);
    expect_same_outputs(s, "paged", a, b, run_contiguous(s, *p, a.data(), 0, s.mixed),
                        run_paged(s, layout_block, *p, b.data(), p->copies - 1));
  }
  const bool sequence_major = block_size == kSequenceMajor;
  if (sequence_major && p->seq_k.empty()) {
    add_sequence_major(s, *p);
    std::vector<float> a(p->q.size(), NAN), b(p->q.size(), NAN);
    expect_same_outputs(s, "[B, S, Hkv, D]", a, b, run_contiguous(s, *p, a.data(), 0),
                        run_contiguous(s, *p, b.data(), 0, false, true));
  }
  std::vector<float> out(p->q.size());
  bool all_ok = true;
  int copy = 0;
  for (auto _ : state) {
    all_ok &=
        (block_size <= 0 ? run_contiguous(s, *p, out.data(), copy, block_size == -1, sequence_major)
                         : run_paged(s, block_size, *p, out.data(), copy))
            .ok();
    copy = (copy + 1) % p->copies;
    benchmark::ClobberMemory();
  }
  if (!all_ok) state.SkipWithError("the call returned an error");
  state.SetLabel(block_size == 0  ? "contiguous"
                 : sequence_major ? "contiguous, [B, S, Hkv, D]"
                 : block_size < 0 ? "contiguous, key lengths"
                 : heads_slots    ? "paged, [blocks, Hkv, slots, D]"
                                  : "paged");
  state.counters["GB/s"] = bench::per_second(paged_kv_bytes(s) * 1e-9);
  state.counters["block_size"] = double(block_size);
}

struct RopeShape {
  int64_t batch, heads, seq, d;
};

const RopeShape kRopeShapes[] = {{1, 8, 2048, 64}, {1, 32, 1024, 128}};

std::string rope_name(const RopeShape& s) {
  return std::to_string(s.batch) + "x" + std::to_string(s.heads) + "x" + std::to_string(s.seq) +
         "x" + std::to_string(s.seq) + "x" + std::to_string(s.d);
}

enum class RopeRun { kApply, kSeparatePass, kSdpaAlone, kFused };

void run_rope(benchmark::State& state, RopeShape s, RopeRun what) {
  using attention::TensorView;
  const int64_t B = s.batch, H = s.heads, S = s.seq, D = s.d, n = B * H * S * D;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> q(n), k(n), v(n), q_rot(n), k_rot(n), out(n);
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = value(rng);
  auto view = [&](std::vector<float>& t) { return TensorView::contiguous(t.data(), {B, H, S, D}); };
  attention::SdpaOptions options;
  options.mask.causal = attention::Causal::TopLeft;
  attention::SdpaOptions fused = options;
  fused.rope = attention::RopeOptions{};
  auto step = [&]() {
    if (what == RopeRun::kFused) {
      return attention::scaled_dot_product_attention(view(q), view(k), view(v), view(out), fused);
    }
    attention::Status status = attention::Status::ok_status();
    if (what != RopeRun::kSdpaAlone) {
      status = attention::apply_rotary_embedding(view(q), view(q_rot));
      if (status && what == RopeRun::kSeparatePass)
        status = attention::apply_rotary_embedding(view(k), view(k_rot));
    }
    if (status && what != RopeRun::kApply)
      status = attention::scaled_dot_product_attention(view(q_rot), view(k_rot), view(v),
                                                       view(out), options);
    return status;
  };
  // Rotated inputs first, so the SDPA-alone run reads the same values.
  for (auto [from, to] : {std::pair{&q, &q_rot}, {&k, &k_rot}}) {
    const attention::Status status = attention::apply_rotary_embedding(view(*from), view(*to));
    if (!status) fail("rope/" + rope_name(s) + ": " + status.message());
  }
  if (what == RopeRun::kFused) {
    std::vector<float> separate(n);
    attention::Status status = attention::scaled_dot_product_attention(
        view(q_rot), view(k_rot), view(v), view(separate), options);
    if (status) status = step();
    if (!status) fail("rope/fused/" + rope_name(s) + ": " + status.message());
    for (int64_t i = 0; i < n; ++i) {
      if (!(std::abs(out[i] - separate[i]) <= 1e-4f * std::max(1.0f, std::abs(separate[i])))) {
        fail("rope/fused/" + rope_name(s) + ": element " + std::to_string(i) + " is " +
             std::to_string(out[i]) + ", the separate pass gives " + std::to_string(separate[i]));
      }
    }
  }
  bool all_ok = true;
  for (auto _ : state) {
    all_ok &= step().ok();
    benchmark::ClobberMemory();
  }
  if (!all_ok) state.SkipWithError("the call returned an error");
  if (what == RopeRun::kApply) {
    state.counters["GB/s"] = bench::per_second(2.0 * n * sizeof(float) * 1e-9);
  } else {
    state.counters["GFLOP/s"] = bench::per_second(4.0 * B * H * 0.5 * S * (S + 1) * D * 1e-9);
  }
}

// A bottom-right sliding window over a longer cache (Mistral-style models; Gemma's local layers):
// window/masked, the call with the window, against window/keys_it_sees, the same rows over the
// last window + rows keys, bottom-right causal without the window (a bound: the window's own
// cut of the first rows is left out, so its output differs and is not compared). Both rotate
// through copies of K and V, 256 MiB or more; GFLOP/s counts the window's pairs for both.
struct WindowShape {
  int64_t batch, heads, kv_heads, rows, keys, d, window;
};

const WindowShape kWindowShapes[] = {{1, 32, 32, 1, 16384, 128, 4095},
                                     {1, 32, 8, 4, 16384, 128, 4095}};

std::string window_name(const WindowShape& s) {
  return std::to_string(s.batch) + "x" + std::to_string(s.heads) + "(" +
         std::to_string(s.kv_heads) + ")x" + std::to_string(s.rows) + "x" + std::to_string(s.keys) +
         "x" + std::to_string(s.d) + "_w" + std::to_string(s.window);
}

void run_window(benchmark::State& state, WindowShape s, bool masked) {
  using attention::TensorView;
  const int64_t B = s.batch, H = s.heads, Hkv = s.kv_heads, S = s.keys, D = s.d;
  const int64_t per_copy = B * Hkv * S * D;
  const int copies = std::max<int>(
      2, static_cast<int>(std::ceil(kPagedRotationBytes / (2.0 * per_copy * sizeof(float)))));
  static std::string drawn;  // the shape k, v and q hold (both rows of a shape share them)
  static std::vector<float> k, v, q, out;
  if (drawn != window_name(s)) {
    drawn = window_name(s);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    k.resize(static_cast<size_t>(per_copy * copies));
    v.resize(k.size());
    q.resize(static_cast<size_t>(B * H * s.rows * D));
    for (auto* t : {&k, &v, &q})
      for (float& x : *t) x = value(rng);
  }
  out.assign(q.size(), 0.0f);
  const int64_t seen = masked ? S : std::min(S, s.window + s.rows);
  attention::SdpaOptions options;
  options.mask.causal = attention::Causal::BottomRight;
  if (masked) options.mask.window = s.window;
  const auto step = [&](int copy) {
    const auto kv = [&](std::vector<float>& t) {
      return TensorView::strided(t.data() + copy * per_copy + (S - seen) * D, {B, Hkv, seen, D},
                                 {Hkv * S * D, S * D, D, 1});
    };
    return attention::scaled_dot_product_attention(
        TensorView::contiguous(q.data(), {B, H, s.rows, D}), kv(k), kv(v),
        TensorView::contiguous(out.data(), {B, H, s.rows, D}), options);
  };
  if (attention::Status status = step(0); !status)
    fail("window/" + window_name(s) + ": " + status.message());
  bool all_ok = true;
  int copy = 0;
  for (auto _ : state) {
    all_ok &= step(copy).ok();
    copy = (copy + 1) % copies;
    benchmark::ClobberMemory();
  }
  if (!all_ok) state.SkipWithError("the call returned an error");
  state.SetLabel(masked ? "window" : "causal over the window's keys");
  state.counters["GFLOP/s"] = bench::per_second(4.0 * B * H * s.rows * (s.window + 1) * D * 1e-9);
}

}  // namespace

namespace bench {

void register_serving_benchmarks() {
  for (const VarlenShape& s : kVarlenShapes) {
    register_timed("varlen/packed/" + varlen_name(s), BM_VarlenPacked, s);
    register_timed("varlen/padded/" + varlen_name(s), BM_VarlenPadded, s);
  }
  for (const RopeShape& s : kRopeShapes) {
    register_timed("rope/apply/" + rope_name(s),
                   [](benchmark::State& state, RopeShape shape) {
                     run_rope(state, shape, RopeRun::kApply);
                   },
                   s);
    register_timed("rope/separate_pass/" + rope_name(s),
                   [](benchmark::State& state, RopeShape shape) {
                     run_rope(state, shape, RopeRun::kSeparatePass);
                   },
                   s);
    register_timed("rope/fused/" + rope_name(s),
                   [](benchmark::State& state, RopeShape shape) {
                     run_rope(state, shape, RopeRun::kFused);
                   },
                   s);
    register_timed("rope/sdpa_alone/" + rope_name(s),
                   [](benchmark::State& state, RopeShape shape) {
                     run_rope(state, shape, RopeRun::kSdpaAlone);
                   },
                   s);
  }
  for (const WindowShape& s : kWindowShapes) {
    for (const bool masked : {true, false}) {
      register_timed(
          std::string(masked ? "window/masked/" : "window/keys_it_sees/") + window_name(s),
          [masked](benchmark::State& state, WindowShape shape) {
            run_window(state, shape, masked);
          },
          s);
    }
  }
  for (const PagedShape& s : kPagedShapes) {
    if (!s.mixed)
      register_timed(
          "paged/contiguous/" + paged_name(s),
          [](benchmark::State& state, PagedShape shape) { run_paged_bench(state, shape, 0); }, s);
    if (!s.mixed)
      register_timed(
          "paged/contiguous_bshd/" + paged_name(s),
          [](benchmark::State& state, PagedShape shape) {
            run_paged_bench(state, shape, kSequenceMajor);
          },
          s);
    register_timed("paged/contiguous_lengths/" + paged_name(s),
                   [](benchmark::State& state, PagedShape shape) { run_paged_bench(state, shape, -1); },
                   s);
    for (int64_t block_size : kBlockSizes) {
      register_timed("paged/bs" + std::to_string(block_size) + "/" + paged_name(s),
                     [block_size](benchmark::State& state, PagedShape shape) {
                       run_paged_bench(state, shape, block_size);
                     },
                     s);
      if (s.mixed) continue;
      register_timed("paged/bs" + std::to_string(block_size) + "_heads_slots/" + paged_name(s),
                     [block_size](benchmark::State& state, PagedShape shape) {
                       run_paged_bench(state, shape, block_size, /*heads_slots=*/true);
                     },
                     s);
    }
  }
}

}  // namespace bench
