// Which memory a GPU may reach, as the sim knows it: device allocations (device_alloc) and pinned host
// allocations (host_pinned_alloc, which CUDA maps into the device's address space under UVA). On the sim
// all of it is host memory, so a kernel given a pointer to a std::vector, or a copy whose device side is
// a host array, gets the right bytes here and an illegal address (or a cudaMemcpy error) on a GPU. The
// launch and the copy and fill calls check their addresses against this registry
// (docs/architecture.md, "The sim").
#pragma once

#include <sys/mman.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <type_traits>

namespace q35::sim {

enum class memory_space { device, pinned };

struct allocation {
  uintptr_t base = 0;
  size_t bytes = 0;
  memory_space space = memory_space::device;
  uintptr_t owner = 0;  // the base of the allocation call it came from (split_allocation makes parts)
};

namespace detail {

struct allocation_registry {
  std::mutex mu;
  std::map<uintptr_t, allocation> at;  // base address -> allocation
};

inline allocation_registry& allocations() {
  static allocation_registry r;
  return r;
}

}  // namespace detail

// Called by the sim's device_alloc / host_pinned_alloc and their frees.
inline void register_allocation(const void* p, size_t bytes, memory_space space) {
  auto& r = detail::allocations();
  std::lock_guard lock(r.mu);
  const auto base = reinterpret_cast<uintptr_t>(p);
  r.at[base] = allocation{base, bytes, space, base};
}
// Forgets the allocation made at `p`, every part of it.
inline void unregister_allocation(const void* p) {
  auto& r = detail::allocations();
  std::lock_guard lock(r.mu);
  const auto base = reinterpret_cast<uintptr_t>(p);
  for (auto it = r.at.find(base); it != r.at.end() && it->second.owner == base;) it = r.at.erase(it);
}

// Makes the bytes of the allocation holding `at`, from `at` to its end, a part of their own in `space`;
// false when `at` is not strictly inside an allocation. For a layout the GPU build makes from two
// allocations and the sim from one (the expert store's pinned homes and device slots, which 32-bit
// indexes from one base must reach).
inline bool split_allocation(const void* at, memory_space space) {
  auto& r = detail::allocations();
  std::lock_guard lock(r.mu);
  const auto a = reinterpret_cast<uintptr_t>(at);
  auto it = r.at.upper_bound(a);
  if (it == r.at.begin()) return false;
  allocation& g = (--it)->second;
  if (a == g.base || a - g.base >= g.bytes) return false;
  const allocation tail{a, g.bytes - (a - g.base), space, g.owner};
  g.bytes = a - g.base;
  r.at[a] = tail;
  return true;
}

// The allocation whose bytes, or whose one-past-the-end address, `p` points to.
inline std::optional<allocation> allocation_at(const void* p) {
  auto& r = detail::allocations();
  std::lock_guard lock(r.mu);
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = r.at.upper_bound(a);
  if (it == r.at.begin()) return std::nullopt;
  --it;
  if (a - it->second.base > it->second.bytes) return std::nullopt;
  return it->second;
}

// Whether [p, p + bytes) lies inside one allocation of `space`.
inline bool in_space(const void* p, size_t bytes, memory_space space) {
  const auto g = allocation_at(p);
  const auto off = reinterpret_cast<uintptr_t>(p) - (g ? g->base : 0);
  return g && g->space == space && bytes <= g->bytes - off;
}

// Whether the page holding `p` is mapped in this process (msync answers ENOMEM for an unmapped range,
// and is a no-op for an anonymous private one). Addresses below the first 64 KB (mmap_min_addr) or
// above the 47-bit user half are never host memory.
inline bool host_mapped(uintptr_t a) {
  if (a < (uintptr_t(1) << 16) || a >= (uintptr_t(1) << 47)) return false;
  const uintptr_t page = a & ~uintptr_t(4095);
  return msync(reinterpret_cast<void*>(page), 1, MS_ASYNC) == 0;
}

// A pointer member of a kernel's parameters that holds an address in host memory a GPU cannot reach.
struct host_pointer {
  size_t offset = 0;  // bytes into the parameters
  uintptr_t value = 0;
};

namespace detail {

// Converts to any member type, in unevaluated aggregate initializations only: counts an aggregate's
// members (as Boost.PFR does, which Debian's Boost 1.74 lacks). Each one is braced, {any_member}, so
// that a C array member takes one initializer, not one per element (brace elision).
// It does not convert to a class with constructors (dim3), which {any_member} initializes through one
// of them instead: with both, the copy constructor and dim3(unsigned) would be ambiguous.
struct any_member {
  template <class T>
  requires(!std::is_class_v<T> || std::is_aggregate_v<T>) operator T() const noexcept;
};

template <class T, class... A>
consteval size_t member_count() {
  if constexpr (requires { T{{A{}}..., {any_member{}}}; })
    return member_count<T, A..., any_member>();
  else
    return sizeof...(A);
}

template <class F, class... M>
void visit_members(F& f, const M&... m) {
  (f(m), ...);
}

inline constexpr size_t max_reflected_members = 24;

// Calls f on each member of the aggregate t (no members in a base class: what structured bindings take).
template <class T, class F>
void for_each_member(const T& t, F& f) {
  constexpr size_t n = member_count<T>();
  static_assert(n <= max_reflected_members, "a kernel's parameters have more members than the sim reflects");
#define Q35_SIM_MEMBERS(N, ...)    \
  if constexpr (n == N) {          \
    const auto& [__VA_ARGS__] = t; \
    visit_members(f, __VA_ARGS__); \
  }
  Q35_SIM_MEMBERS(1, m0)
  Q35_SIM_MEMBERS(2, m0, m1)
  Q35_SIM_MEMBERS(3, m0, m1, m2)
  Q35_SIM_MEMBERS(4, m0, m1, m2, m3)
  Q35_SIM_MEMBERS(5, m0, m1, m2, m3, m4)
  Q35_SIM_MEMBERS(6, m0, m1, m2, m3, m4, m5)
  Q35_SIM_MEMBERS(7, m0, m1, m2, m3, m4, m5, m6)
  Q35_SIM_MEMBERS(8, m0, m1, m2, m3, m4, m5, m6, m7)
  Q35_SIM_MEMBERS(9, m0, m1, m2, m3, m4, m5, m6, m7, m8)
  Q35_SIM_MEMBERS(10, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9)
  Q35_SIM_MEMBERS(11, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10)
  Q35_SIM_MEMBERS(12, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11)
  Q35_SIM_MEMBERS(13, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12)
  Q35_SIM_MEMBERS(14, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13)
  Q35_SIM_MEMBERS(15, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14)
  Q35_SIM_MEMBERS(16, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15)
  Q35_SIM_MEMBERS(17, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16)
  Q35_SIM_MEMBERS(18, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17)
  Q35_SIM_MEMBERS(19, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18)
  Q35_SIM_MEMBERS(20, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19)
  Q35_SIM_MEMBERS(21, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20)
  Q35_SIM_MEMBERS(22, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20,
                  m21)
  Q35_SIM_MEMBERS(23, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20,
                  m21, m22)
  Q35_SIM_MEMBERS(24, m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20,
                  m21, m22, m23)
#undef Q35_SIM_MEMBERS
}

template <class T>
struct is_std_array : std::false_type {};
template <class T, size_t N>
struct is_std_array<std::array<T, N> > : std::true_type {};

// The first pointer member, at any depth of nested aggregates and std::arrays, of `m` (which lies in
// the parameters that start at `base`) holding a host address outside every device and pinned
// allocation. Members of other class types (with constructors: dim3) are not looked into.
template <class M>
std::optional<host_pointer> host_pointer_in(const M& m, const unsigned char* base) {
  std::optional<host_pointer> found;
  if constexpr (std::is_pointer_v<M>) {
    const auto a = reinterpret_cast<uintptr_t>(m);
    if (a && !allocation_at(reinterpret_cast<const void*>(a)) && host_mapped(a))
      found = host_pointer{size_t(reinterpret_cast<const unsigned char*>(&m) - base), a};
  } else if constexpr (is_std_array<M>::value || std::is_array_v<M>) {
    for (const auto& e : m)
      if (!found) found = host_pointer_in(e, base);
  } else if constexpr (std::is_class_v<M> && std::is_aggregate_v<M>) {
    auto visit = [&](const auto& member) {
      if (!found) found = host_pointer_in(member, base);
    };
    for_each_member(m, visit);
  }
  return found;
}

}  // namespace detail

// The first pointer member of a kernel's parameters (an aggregate) that holds an address in mapped host
// memory outside every device and pinned allocation: a std::vector's data or a stack array, which a GPU
// cannot reach. Only pointer members are looked at, so integers, seeds and padding never count.
template <class Params>
std::optional<host_pointer> find_host_pointer(const Params& p) {
  // a class with constructors or private members would not be looked into, and its pointers not checked
  static_assert(std::is_aggregate_v<Params>,
                "a kernel's parameters must be an aggregate (the sim checks its pointers)");
  return detail::host_pointer_in(p, reinterpret_cast<const unsigned char*>(&p));
}

}  // namespace q35::sim
