// Runs a grid on the host: each block's threads are fibers scheduled between barriers in the
// selected order; blocks run one after another on each of `workers` OS threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "q35/core/status.hpp"
#include "q35/sim/device_api.hpp"
#include "q35/sim/options.hpp"
#include "q35/sim/stack_pool.hpp"
#include "q35/sim/visibility.hpp"

namespace q35::sim {

// What the executor needs from a launch: the per-thread body and the block's resources.
struct launch_config {
  const char* kernel_name;
  dim3 grid, block;
  size_t shared_bytes;                                   // static + dynamic, placed at one 16-byte aligned address
  void (*body)(const void* ctx, unsigned char* shared);  // runs one thread of the kernel
  const void* ctx;
};

namespace detail {

class block_runner {
 public:
  block_runner(const launch_config& cfg, const options& opt)
      : cfg_(cfg),
        opt_(opt),
        pool_(thread_pool(size_t(volume(cfg.block)), opt.stack_bytes)),
        race_fibers_(size_t(volume(cfg.block))),
        shared_(new (std::align_val_t(64)) unsigned char[std::max<size_t>(cfg.shared_bytes, 16)]) {}
  ~block_runner() { operator delete[](shared_, std::align_val_t(64)); }

  // Runs block `linear`; returns the error text ("" when the block completed correctly).
  std::string run(int64_t linear) {
    const dim3 g = cfg_.grid, bd = cfg_.block;
    block_state b;
    b.kernel_name = cfg_.kernel_name;
    b.block_idx = dim3(unsigned(linear % g.x), unsigned(linear / g.x % g.y), unsigned(linear / (int64_t(g.x) * g.y)));
    b.block_dim = bd;
    b.grid_dim = g;
    b.shared = shared_;
    b.shared_bytes = cfg_.shared_bytes;
    // a read before a write shows up (options::fill; 0xff unless one is given)
    std::memset(shared_, opt_.fill >= 0 ? opt_.fill : 0xff, cfg_.shared_bytes);
    if (tls_visibility) tls_visibility->begin_block();
    const int n = int(volume(bd));
    b.threads.resize(size_t(n));
    b.warps.resize(size_t((n + 31) / 32));
    for (int r = 0; r < n; ++r) {
      auto& t = b.threads[size_t(r)];
      t.rank = r;
      if constexpr (race::enabled) t.race_fiber = race_fibers_[size_t(r)];
      t.tid = dim3(unsigned(r % int(bd.x)), unsigned(r / int(bd.x) % int(bd.y)), unsigned(r / (int(bd.x) * int(bd.y))));
      b.warps[size_t(r / 32)].existing |= 1u << (r % 32);
      t.self =
          boost::context::fiber(std::allocator_arg, pooled_stack{&pool_, &t.stack},
                                [this, &b, &t](boost::context::fiber&& sink) { return entry(b, t, std::move(sink)); });
      race::drop_fiber_entry_frame();
    }
    schedule(b, linear);
    if (!b.error.empty()) {
      for (auto& t : b.threads) {
        if (!t.self) continue;
        void* scheduler = race::current_fiber();
        race::switch_to_thread(t.race_fiber, false);
        unwind(t);  // unwinds the suspended fiber
        race::switch_to_scheduler(scheduler);
      }
    }
    return b.error;
  }

 private:
  // Resumes t's fiber, or unwinds it, announced to AddressSanitizer (asan_fiber.hpp). Inlined, so
  // that ThreadSanitizer builds see the same frames between their switch annotations as before.
  [[gnu::always_inline]] static void resume(thread_state& t) {
    void* fake = nullptr;
    asan::start_switch(&fake, asan::bounds_of(t.stack));
    t.self = std::move(t.self).resume();
    asan::finish_switch(fake);
  }
  [[gnu::always_inline]] static void unwind(thread_state& t) {
    void* fake = nullptr;
    asan::start_switch(&fake, asan::bounds_of(t.stack));
    t.self = {};
    asan::finish_switch(fake);
  }

  boost::context::fiber entry(block_state& b, thread_state& t, boost::context::fiber&& sink) {
    asan::finish_switch(nullptr, &t.scheduler_stack);  // the fiber's first arrival
    t.scheduler = std::move(sink);
    if constexpr (race::enabled || asan::enabled) {
      if constexpr (race::enabled)
        if (t.race_fiber->ignoring) race::ignore_end(), t.race_fiber->ignoring = false;  // (the fiber's last thread)
      yield_to_scheduler(t);  // started by schedule(), before any kernel code
    }
    try {
      cfg_.body(cfg_.ctx, b.shared);
    } catch (const boost::context::detail::forced_unwind&) {
      if constexpr (race::enabled) race::ignore_begin(), t.race_fiber->ignoring = true;  // until the scheduler's
      throw;
    } catch (const std::exception& e) {
      race::ignore_scope sim_bookkeeping;
      if (b.error.empty()) b.error = e.what();
    }
    {
      race::ignore_scope sim_bookkeeping;
      t.state = run_state::done;
      ++b.n_done;
      if (b.error.empty()) check_exit(b, t);
    }
    // From here to the scheduler's annotation the code is the scheduler's, seen as this fiber's
    // (race_check.hpp); the next thread to run on the fiber ends the ignore.
    if constexpr (race::enabled) race::ignore_begin(), t.race_fiber->ignoring = true;
    asan::start_switch(nullptr, t.scheduler_stack);  // the fiber ends
    return std::move(t.scheduler);
  }

  // A lane that returns while lanes of its warp wait for it in a collective can never be matched.
  static void check_exit(block_state& b, thread_state& t) {
    auto& w = b.warps[size_t(t.rank / 32)];
    const uint32_t me = 1u << (t.rank % 32);
    w.exited |= me;
    for (auto& p : w.pending)
      if (p.mask & me)
        b.error = b.where(t) + ": returned while lanes " + lane_list(p.arrived) + " wait for it in " +
                  to_string(p.kind) + " with mask " + hex_mask(p.mask);
  }

  void make_order(std::vector<int>& order, int n, int64_t linear, int phase) const {
    order.resize(size_t(n));
    std::iota(order.begin(), order.end(), 0);
    if (opt_.order == thread_order::reverse) std::reverse(order.begin(), order.end());
    if (opt_.order == thread_order::shuffled) {
      std::mt19937_64 rng(opt_.seed ^ (uint64_t(linear) * 0x9e3779b97f4a7c15ull) ^ (uint64_t(phase) << 48));
      std::shuffle(order.begin(), order.end(), rng);
    }
  }

  void schedule(block_state& b, int64_t linear) {
    const int n = int(b.threads.size());
    std::vector<int> order;
    int phase = 0;
    make_order(order, n, linear, phase);
    tls_block = &b;
    void* const scheduler = race::current_fiber();
    if constexpr (race::enabled || asan::enabled) {
      // Start every fiber, synchronized with the scheduler: what the host and the scheduler wrote
      // before the block happens before each thread. Later switches into a fiber do not synchronize
      // (race_check.hpp), so nothing one thread does reaches another through the scheduler. (ASan:
      // so that every fiber the block's end unwinds has arrived once, asan_fiber.hpp.)
      for (auto& t : b.threads) {
        tls_thread = &t;
        race::switch_to_thread(t.race_fiber, true);
        resume(t);
        race::switch_to_scheduler(scheduler);
      }
    }
    for (;;) {
      // Consecutive entries of `order` from one warp form a run, and a run is resumed until none of
      // its threads can go on. Forward and reverse orders list whole warps, so each warp runs ahead
      // alone to the next barrier (exposing missing barriers between warps); a shuffled order makes
      // runs of about one thread, interleaving all threads at every collective.
      bool progress = false;
      for (size_t begin = 0; begin < order.size() && b.error.empty();) {
        size_t end = begin + 1;
        while (end < order.size() && order[end] / warp_size == order[begin] / warp_size) ++end;
        for (bool again = true; again && b.error.empty();) {
          again = false;
          for (size_t i = begin; i < end; ++i) {
            auto& t = b.threads[size_t(order[i])];
            if (t.state != run_state::ready) continue;
            progress = again = true;
            tls_thread = &t;
            race::switch_to_thread(t.race_fiber, false);
            resume(t);
            race::switch_to_scheduler(scheduler);
            if (!b.error.empty()) break;
          }
        }
        begin = end;
      }
      tls_thread = nullptr;
      if (!b.error.empty()) break;
      if (progress) continue;
      if (b.n_done == n) break;
      if (b.n_at_barrier == n - b.n_done) {
        if (b.n_done > 0) {
          b.error = barrier_error(b, "sync_block() reached by " + std::to_string(b.n_at_barrier) + " of " +
                                         std::to_string(n) + " threads; the others had returned");
          break;
        }
        for (auto& t : b.threads)
          if (t.state == run_state::at_barrier) t.state = run_state::ready;
        b.n_at_barrier = 0;
        make_order(order, n, linear, ++phase);
        continue;
      }
      b.error = deadlock_error(b);
      break;
    }
    tls_block = nullptr;
  }

  static const thread_state* first_in(const block_state& b, run_state s) {
    for (auto& t : b.threads)
      if (t.state == s) return &t;
    return nullptr;
  }

  static std::string barrier_error(const block_state& b, const std::string& what) {
    const thread_state* waiting = first_in(b, run_state::at_barrier);
    const thread_state* gone = first_in(b, run_state::done);
    return b.where(*waiting) + ": " + what + " (e.g. " + b.where(*gone).substr(b.where(*gone).find("thread")) + ")";
  }

  // No thread can run: describe who waits where.
  static std::string deadlock_error(const block_state& b) {
    std::ostringstream os;
    os << "deadlock: ";
    for (size_t wi = 0; wi < b.warps.size(); ++wi) {
      for (auto& p : b.warps[wi].pending) {
        const auto& t = b.threads[wi * 32 + size_t(__builtin_ctz(p.arrived))];
        const uint32_t missing = p.mask & ~p.arrived;
        os << b.where(t) << ": warp collective " << to_string(p.kind) << " with mask " << hex_mask(p.mask)
           << " reached by lanes " << lane_list(p.arrived) << " only; lanes " << lane_list(missing);
        const auto& m = b.threads[wi * 32 + size_t(__builtin_ctz(missing))];
        os << (m.state == run_state::at_barrier ? " wait at sync_block()" : " wait in another collective") << ". ";
        return os.str();
      }
    }
    if (const thread_state* t = first_in(b, run_state::at_barrier))
      os << b.where(*t) << ": sync_block() reached by " << b.n_at_barrier << " of " << b.threads.size() << " threads";
    return os.str();
  }

  // Stacks are mapped once per OS thread and reused by later launches of the same or smaller blocks.
  static stack_pool& thread_pool(size_t n, size_t stack_bytes) {
    thread_local std::unique_ptr<stack_pool> pool;
    if (!pool || pool->capacity() < n || pool->stack_bytes() < stack_bytes)
      pool = std::make_unique<stack_pool>(std::max<size_t>(n, 32), stack_bytes);
    return *pool;
  }

  const launch_config& cfg_;
  const options& opt_;
  stack_pool& pool_;
  race::fiber_lease race_fibers_;  // (ThreadSanitizer builds: race_check.hpp)
  unsigned char* shared_;
};

}  // namespace detail

// Runs every block of the grid; the first error (by block order within a worker) is returned.
inline status execute(const launch_config& cfg, const options& opt = current_options()) {
  const int64_t n_blocks = volume(cfg.grid);
  if (n_blocks == 0) return status::success();
  // delay_stores: one worker, so the bytes that change while a block runs are that block's stores.
  const int workers = opt.delay_stores ? 1 : int(std::min<int64_t>(std::max(opt.workers, 1), n_blocks));
  std::unique_ptr<store_visibility> visibility;
  if (opt.delay_stores) visibility = std::make_unique<store_visibility>();
  struct visibility_scope {
    store_visibility* saved = detail::tls_visibility;
    explicit visibility_scope(store_visibility* v) { detail::tls_visibility = v; }
    ~visibility_scope() { detail::tls_visibility = saved; }
  } scope(visibility.get());
  // relaxed: handing out block numbers must not order the blocks of two workers (for ThreadSanitizer,
  // sim/race_check.hpp, a seq_cst counter would make every block happen before the next one taken)
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string first_error;
  auto work = [&] {
    try {
      detail::block_runner runner(cfg, opt);
      for (int64_t i;
           !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1, std::memory_order_relaxed)) < n_blocks;) {
        std::string e = runner.run(i);
        if (!e.empty()) {
          std::lock_guard lock(mu);
          if (!failed.exchange(true)) first_error = std::move(e);
        }
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(mu);
      if (!failed.exchange(true)) first_error = std::string("sim executor: ") + e.what();
    }
  };
  if (workers == 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (int w = 0; w < workers; ++w) pool.emplace_back(work);
    for (auto& th : pool) th.join();
  }
  if (failed) return error(status_code::kernel_fault, first_error);
  return status::success();
}

}  // namespace q35::sim
