// A lowering pass for AMX kernels: several accumulator tiles in flight.
//
// Halide 21 lowers a Func stored in MemoryType::AMXTile to one tile register, and refuses a second
// AMX allocation inside the first ("Already in AMX allocation"), so a schedule can only reach one
// accumulator at a time: every tdpbf16ps waits for the previous one on the same tile, at the
// instruction's latency rather than its throughput (bench/RESULTS.md, "Intel Xeon with AMX").
// This pass runs after Halide has extracted the tile operations and does what oneDNN's brgemm
// kernels do by hand: a nest of constant loops (at most kMaxAccumulators iterations in all) around
// one AMX allocation of the form
//
//   for x in [0, X): for y in [0, Y):
//     allocate acc in AMXTile { acc = tile_zero; for r: acc = tile_matmul(acc, A(x, r), B(y, r));
//                               tile_store(out(x, y), acc) }
//
// becomes one allocation per iteration and the reduction loop jammed over them,
//
//   acc00 = acc01 = ... = tile_zero;
//   for r: a_x = A(x, r), b_y = B(y, r) loaded once each; acc_xy = tile_matmul(acc_xy, a_x, b_y)
//   tile_store(out(x, y), acc_xy) for each x, y
//
// With 2 × 2 accumulators that is four independent tdpbf16ps chains and four tile loads for four
// products (the eight tile registers: four accumulators, two rows of A, two columns of B).
// Anything that does not match the form is left as Halide lowered it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "Halide.h"

namespace attention_gen {

class AmxUnrollAndJam : public Halide::Internal::IRMutator {
 public:
  static constexpr int kMaxAccumulators = 4;

 private:
  using Stmt = Halide::Internal::Stmt;
  using Expr = Halide::Expr;

  using IRMutator::visit;

  // An AMX allocation left as it was is a schedule that no longer has the form: say so at build
  // time rather than ship a kernel at a quarter of its speed.
  Stmt visit(const Halide::Internal::Allocate* op) override {
    _halide_user_assert(op->memory_type != Halide::MemoryType::AMXTile)
        << "AmxUnrollAndJam: the AMX allocation " << op->name
        << " is not under a nest of constant loops it can jam (lowering/amx_jam.h)\n";
    return IRMutator::visit(op);
  }

  // Lets inlined, producer/consumer markers dropped, blocks flattened: the leaves in order.
  static void flatten(const Stmt& s, std::vector<Stmt>* leaves) {
    using namespace Halide::Internal;
    if (const auto* let = s.as<LetStmt>()) {
      flatten(substitute(let->name, let->value, let->body), leaves);
    } else if (const auto* block = s.as<Block>()) {
      flatten(block->first, leaves);
      flatten(block->rest, leaves);
    } else if (const auto* pc = s.as<ProducerConsumer>()) {
      flatten(pc->body, leaves);
    } else {
      leaves->push_back(s);
    }
  }

  static Stmt inline_lets(Stmt s) {
    using namespace Halide::Internal;
    while (const auto* let = s.as<LetStmt>()) s = substitute(let->name, let->value, let->body);
    return s;
  }

  static bool is_amx(const Stmt& s) {
    const auto* a = s.as<Halide::Internal::Allocate>();
    return a != nullptr && a->memory_type == Halide::MemoryType::AMXTile;
  }

  // One instance of the allocation's body, split into its zero, reduction loop and stores.
  struct Instance {
    std::string name;
    Stmt zero;
    const Halide::Internal::For* loop = nullptr;
    Stmt loop_stmt;           // keeps `loop` alive
    Stmt update;              // the loop's body: acc = tile_matmul(...)
    std::vector<Stmt> after;  // tile_store and anything else after the loop, frees dropped
  };

  static bool split_instance(const Halide::Internal::Allocate* alloc, const std::string& name,
                             Instance* out) {
    using namespace Halide::Internal;
    std::vector<Stmt> leaves;
    flatten(alloc->body, &leaves);
    out->name = name;
    size_t n = 0;
    for (const Stmt& leaf : leaves) {
      if (leaf.as<Free>() != nullptr) continue;
      if (n == 0) {
        const auto* store = leaf.as<Store>();
        if (store == nullptr || store->name != alloc->name) return false;
        out->zero = leaf;
      } else if (n == 1) {
        out->loop_stmt = leaf;
        out->loop = leaf.as<For>();
        if (out->loop == nullptr) return false;
        out->update = inline_lets(out->loop->body);
        const auto* store = out->update.as<Store>();
        if (store == nullptr || store->name != alloc->name) return false;
      } else {
        out->after.push_back(leaf);
      }
      ++n;
    }
    return n >= 3;
  }

  Stmt visit(const Halide::Internal::For* op) override {
    using namespace Halide::Internal;
    // The nest of constant loops down to the AMX allocation.
    std::vector<const For*> loops;
    std::vector<Stmt> keep;  // the nodes `loops` points into (inlining lets makes new ones)
    Stmt body = Stmt(op);
    int count = 1;
    while (const auto* f = body.as<For>()) {
      const auto extent = Halide::Internal::as_const_int(f->extent);
      if (!extent || *extent < 1 || f->for_type != ForType::Serial) break;
      count *= int(*extent);
      loops.push_back(f);
      keep.push_back(body);
      body = inline_lets(f->body);
    }
    if (loops.empty() || !is_amx(body) || count < 2 || count > kMaxAccumulators) {
      return IRMutator::visit(op);
    }
    // Every iteration's copy of the allocation, loop variables replaced by constants.
    std::vector<Instance> instances;
    for (int k = 0; k < count; ++k) {
      std::map<std::string, Expr> values;
      int rest = k;
      for (int l = int(loops.size()) - 1; l >= 0; --l) {
        const int extent = int(*Halide::Internal::as_const_int(loops[l]->extent));
        values[loops[l]->name] = simplify(loops[l]->min + rest % extent);
        rest /= extent;
      }
      // The innermost loop's body already has the outer loops' lets inlined.
      Stmt copy = substitute(values, inline_lets(loops.back()->body));
      const auto* alloc = copy.as<Allocate>();
      if (alloc == nullptr) return IRMutator::visit(op);
      const std::string name = alloc->name + "." + std::to_string(k);
      Stmt renamed = rename_buffer(Stmt(alloc), alloc->name, name);
      Instance inst;
      if (!split_instance(renamed.as<Allocate>(), name, &inst)) return IRMutator::visit(op);
      if (!instances.empty()) {
        const For* first = instances.front().loop;
        if (inst.loop->name != first->name || !equal(inst.loop->min, first->min) ||
            !equal(inst.loop->extent, first->extent)) {
          return IRMutator::visit(op);
        }
      }
      instances.push_back(inst);
    }
    // The jammed reduction: each distinct tile load bound once, then every update.
    std::vector<Stmt> updates;
    for (const Instance& inst : instances) updates.push_back(inst.update);
    Stmt jammed_body = share_tile_loads(Block::make(updates));
    const For* loop = instances.front().loop;
    Stmt result = For::make(loop->name, loop->min, loop->extent, loop->for_type,
                            loop->partition_policy, loop->device_api, jammed_body);
    std::vector<Stmt> seq;
    for (const Instance& inst : instances) seq.push_back(inst.zero);
    seq.push_back(result);
    for (const Instance& inst : instances) {
      for (const Stmt& s : inst.after) seq.push_back(s);
    }
    for (const Instance& inst : instances) seq.push_back(Free::make(inst.name));
    result = Block::make(seq);
    const auto* proto = body.as<Allocate>();
    for (auto it = instances.rbegin(); it != instances.rend(); ++it) {
      result = Allocate::make(it->name, proto->type, proto->memory_type, proto->extents,
                              proto->condition, result);
    }
    return result;
  }

  // Each distinct tile_load bound to a let once (Halide's CSE works within one expression).
  static Stmt share_tile_loads(Stmt body) {
    using namespace Halide::Internal;
    class Collect : public IRVisitor {
     public:
      std::vector<Expr> loads;
      using IRVisitor::visit;

     private:
      void visit(const Call* op) override {
        IRVisitor::visit(op);
        if (op->name != "tile_load") return;
        for (const Expr& e : loads) {
          if (equal(e, Expr(op))) return;
        }
        loads.emplace_back(op);
      }
    } collect;
    body.accept(&collect);
    std::vector<std::pair<std::string, Expr>> lets;
    for (const Expr& load : collect.loads) {
      const std::string name = unique_name("amx_operand");
      body = substitute(load, Variable::make(load.type(), name), body);
      lets.emplace_back(name, load);
    }
    for (auto it = lets.rbegin(); it != lets.rend(); ++it) {
      body = LetStmt::make(it->first, it->second, body);
    }
    return body;
  }

  // The allocation, its loads and stores, and its free under a new name.
  static Stmt rename_buffer(const Stmt& s, const std::string& from, const std::string& to) {
    using namespace Halide::Internal;
    class Rename : public IRMutator {
     public:
      Rename(std::string f, std::string t) : from_(std::move(f)), to_(std::move(t)) {}
      using IRMutator::visit;

     private:
      std::string from_, to_;
      Expr visit(const Load* op) override {
        Expr e = IRMutator::visit(op);
        op = e.as<Load>();
        if (op->name != from_) return e;
        return Load::make(op->type, to_, op->index, op->image, op->param, op->predicate,
                          op->alignment);
      }
      Stmt visit(const Store* op) override {
        Stmt s = IRMutator::visit(op);
        op = s.as<Store>();
        if (op->name != from_) return s;
        return Store::make(to_, op->value, op->index, op->param, op->predicate, op->alignment);
      }
      Stmt visit(const Allocate* op) override {
        Stmt s = IRMutator::visit(op);
        op = s.as<Allocate>();
        if (op->name != from_) return s;
        return Allocate::make(to_, op->type, op->memory_type, op->extents, op->condition, op->body,
                              op->new_expr, op->free_function, op->padding);
      }
      Stmt visit(const Free* op) override { return op->name == from_ ? Free::make(to_) : Stmt(op); }
      Expr visit(const Variable* op) override {
        return op->name == from_
                   ? Variable::make(op->type, to_, op->image, op->param, op->reduction_domain)
                   : Expr(op);
      }
    };
    return Rename(from, to).mutate(s);
  }
};

}  // namespace attention_gen
