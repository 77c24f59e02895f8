// What a kernel sees on the sim: its indices, the block barrier and the warp collectives.
// arch/ wraps these behind the backend-neutral names; kernels never call them directly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "q35/sim/state.hpp"

namespace q35::sim {

inline dim3 thread_idx() { return detail::current_thread().tid; }
inline dim3 block_idx() { return detail::tls_block->block_idx; }
inline dim3 block_dim() { return detail::tls_block->block_dim; }
inline dim3 grid_dim() { return detail::tls_block->grid_dim; }
inline unsigned char* block_shared() { return detail::tls_block->shared; }
// Whether [p, p + bytes) lies in this block's shared memory. What a GPU reaches only through the
// shared state space (ldmatrix's rows, cp.async's destination) or only through the global one (the
// read-only loads, cp.async's source) is checked with it: on the sim all memory is one, on a GPU the
// wrong space is a wrong or illegal address. False outside a kernel.
inline bool in_block_shared(const void* p, size_t bytes) {
  const auto* b = detail::tls_block;
  if (!b) return false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), s = reinterpret_cast<uintptr_t>(b->shared);
  return a >= s && bytes <= b->shared_bytes && a - s <= b->shared_bytes - bytes;
}

// Block barrier: every thread of the block must reach it (checked by the scheduler).
inline void sync_block() {
  auto& t = detail::current_thread();
  race::ignore_scope sim_bookkeeping;
  const char* sync = &detail::tls_block->barrier_sync[t.barriers++ % 2];  // (race_check.hpp)
  race::release(sync);
  t.state = detail::run_state::at_barrier;
  ++detail::tls_block->n_at_barrier;
  detail::yield_to_scheduler(t);
  race::acquire(sync);
}

namespace detail {

// Result of `kind` for `lane`, once every lane of `pc` has stored its value and argument.
inline uint64_t collective_result(block_state& b, int warp, const pending_collective& pc, int lane) {
  thread_state* lanes = &b.threads[size_t(warp) * 32];
  auto& me = lanes[lane];
  const int seg = lane & ~(pc.width - 1);
  int src = lane;
  switch (pc.kind) {
    case collective_kind::shfl_idx:
      src = seg + (me.arg & (pc.width - 1));
      break;
    case collective_kind::shfl_up:
      src = (lane - seg) >= me.arg ? lane - me.arg : lane;
      break;
    case collective_kind::shfl_down:
      src = (lane - seg) + me.arg < pc.width ? lane + me.arg : lane;
      break;
    case collective_kind::shfl_xor:
      src = (lane ^ me.arg) < seg + pc.width ? (lane ^ me.arg) : lane;
      break;
    case collective_kind::ballot:
    case collective_kind::any:
    case collective_kind::all: {
      uint32_t votes = 0;
      for (int l = 0; l < 32; ++l)
        if ((pc.mask >> l & 1u) && lanes[l].value) votes |= 1u << l;
      if (pc.kind == collective_kind::ballot) return votes;
      if (pc.kind == collective_kind::any) return votes != 0;
      return votes == pc.mask;
    }
    case collective_kind::sync_warp:
      return 0;
  }
  if (src < 0 || src > 31 || !(pc.mask >> src & 1u)) {
    tls_thread = &me;
    fail(std::string(to_string(pc.kind)) + " reads lane " + std::to_string(src) + ", which is not in mask " +
         hex_mask(pc.mask) + " (its value is undefined on a GPU)");
  }
  return lanes[src].value;
}

}  // namespace detail

// One warp collective: every lane named in `mask` (which must name the caller) must call the same
// collective with the same mask and width; the caller waits until they all have.
// The calling warp's scratch, [lane][16 words] (warp_state::scratch). A lane writes its own row, then
// the lanes meet in a sync_warp before reading others' rows, and again before the rows are rewritten.
inline uint32_t (&warp_scratch())[32][16] {
  auto& t = detail::current_thread();
  return detail::tls_block->warps[size_t(t.rank / 32)].scratch;
}

inline uint64_t warp_collective(collective_kind kind, uint32_t mask, int width, uint64_t value, int arg) {
  using namespace detail;
  auto& t = current_thread();
  race::ignore_scope sim_bookkeeping;  // lanes meet through the warp's sync object (race_check.hpp)
  auto& b = *tls_block;
  const int warp = t.rank / 32, lane = t.rank % 32;
  auto& w = b.warps[size_t(warp)];
  const uint32_t me = 1u << lane;
  if (!(mask & me))
    fail(std::string(to_string(kind)) + " with mask " + hex_mask(mask) + " that does not name the calling lane");
  if (width < 1 || width > 32 || (width & (width - 1)))
    fail(std::string(to_string(kind)) + " with width " + std::to_string(width) + " (must be a power of two <= 32)");
  const uint32_t need = mask & w.existing;
  if (need & w.exited)
    fail(std::string(to_string(kind)) + " with mask " + hex_mask(mask) + " names lanes " + lane_list(need & w.exited) +
         " that have already exited");
  pending_collective* pc = nullptr;
  for (auto& p : w.pending) {
    if (!(p.mask & me) && !(p.mask & need)) continue;
    if (p.mask != need || p.kind != kind || p.width != width)
      fail(std::string(to_string(kind)) + "(mask " + hex_mask(mask) + ", width " + std::to_string(width) +
           ") meets lanes " + lane_list(p.arrived) + " waiting in " + to_string(p.kind) + "(mask " + hex_mask(p.mask) +
           ", width " + std::to_string(p.width) + "): the lanes of a warp disagree on the collective");
    pc = &p;
    break;
  }
  if (!pc) {
    w.pending.push_back({need, 0, kind, width});
    pc = &w.pending.back();
  }
  t.value = value;
  t.arg = arg;
  pc->arrived |= me;
  race::release(&w);
  if (pc->arrived != pc->mask) {
    t.state = run_state::in_collective;
    yield_to_scheduler(t);
    race::acquire(&w);
    return t.result;
  }
  race::acquire(&w);
  // Last lane in: compute every lane's result, wake the others, and carry on.
  const pending_collective done = *pc;
  thread_state* lanes = &b.threads[size_t(warp) * 32];
  for (int l = 0; l < 32; ++l)
    if (done.mask >> l & 1u) lanes[l].result = collective_result(b, warp, done, l);
  tls_thread = &t;
  for (int l = 0; l < 32; ++l)
    if ((done.mask >> l & 1u) && l != lane) lanes[l].state = run_state::ready;
  w.pending.erase(w.pending.begin() + (pc - w.pending.data()));
  return t.result;
}

}  // namespace q35::sim
