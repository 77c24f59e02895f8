// Fiber stacks for the sim: one mapping per pool, a guard page under each stack, reused across blocks.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/stack_context.hpp>
#include <cstddef>
#include <new>
#include <vector>

#include "q35/sim/asan_fiber.hpp"
#include "q35/sim/race_check.hpp"

namespace q35::sim::detail {

class stack_pool {
 public:
  stack_pool(size_t n_stacks, size_t stack_bytes) {
    page_ = size_t(sysconf(_SC_PAGESIZE));
    stride_ = ((stack_bytes + page_ - 1) / page_) * page_ + page_;  // + guard page
    bytes_ = stride_ * n_stacks;
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<char*>(p);
    free_.reserve(n_stacks);
    for (size_t i = 0; i < n_stacks; ++i) {
      char* lo = base_ + i * stride_;
      mprotect(lo, page_, PROT_NONE);  // overflow faults instead of corrupting a neighbour
      free_.push_back(lo + stride_);   // stacks grow down: hand out the top
    }
    capacity_ = n_stacks;
  }
  ~stack_pool() {
    asan::unpoison(base_, bytes_);
    munmap(base_, bytes_);
  }
  stack_pool(const stack_pool&) = delete;
  stack_pool& operator=(const stack_pool&) = delete;

  size_t capacity() const { return capacity_; }
  size_t stack_bytes() const { return stride_ - page_; }

  boost::context::stack_context pop() {
    if (free_.empty()) throw std::bad_alloc();
    boost::context::stack_context sc;
    sc.sp = free_.back();
    sc.size = stride_ - page_;
    free_.pop_back();
    return sc;
  }
  // (called as a fiber ends, still on that fiber as ThreadSanitizer sees it: race_check.hpp)
  void push(boost::context::stack_context& sc) noexcept {
    race::ignore_scope sim_bookkeeping;
    asan::unpoison(static_cast<char*>(sc.sp) - sc.size, sc.size);
    free_.push_back(static_cast<char*>(sc.sp));
  }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0, page_ = 0, stride_ = 0, capacity_ = 0;
  std::vector<char*> free_;
};

// The StackAllocator boost::context::fiber takes: a handle on a pool; `taken`, when set, receives the
// stack it hands out (the fiber's bounds, for AddressSanitizer: asan_fiber.hpp).
struct pooled_stack {
  stack_pool* pool;
  boost::context::stack_context* taken = nullptr;
  boost::context::stack_context allocate() {
    boost::context::stack_context sc = pool->pop();
    if (taken) *taken = sc;
    return sc;
  }
  void deallocate(boost::context::stack_context& sc) noexcept { pool->push(sc); }
};

}  // namespace q35::sim::detail
