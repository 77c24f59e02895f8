// Consumer of the installed q35 package: a block-sum kernel through launch<K> on the sim backend.
#include <cstdio>
#include <vector>

#include <q35/arch/memory.hpp>
#include <q35/arch/thread.hpp>
#include <q35/block/reduce.hpp>
#include <q35/launch/launch.hpp>

// out[0] = sum of x[0..n), one block of 256 threads.
struct sum_kernel {
  using reduce = q35::block::reduce<float, 256>;
  struct params {
    const float* x;
    float* out;
    int n;
  };
  struct shared_storage {
    reduce::storage red;
  };
  static constexpr int threads = 256;
  static q35::dim3 grid(const params&) { return q35::dim3(1); }
  Q35_DEVICE void operator()(const params& p, shared_storage& s) const {
    float v = 0;
    for (int i = q35::arch::thread_rank(); i < p.n; i += threads) v += p.x[i];
    v = reduce::sum(v, s.red);
    if (q35::arch::thread_rank() == 0) p.out[0] = v;
  }
};

int main() {
  const int n = 1000;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[size_t(i)] = float(i);
  q35::device_buffer<float> d_x, d_out;
  q35::status s = d_x.allocate(n);
  if (s.ok()) s = d_out.allocate(1);
  if (s.ok()) s = d_x.upload(x.data(), n);
  if (s.ok()) s = q35::launch::launch<sum_kernel>({d_x.data(), d_out.data(), n});
  float out = 0;
  if (s.ok()) s = d_out.download(&out, 1);
  if (s.ok()) s = q35::synchronize();
  if (!s.ok()) {
    std::fprintf(stderr, "consumer: %s\n", s.to_string().c_str());
    return 1;
  }
  const float want = float(n) * float(n - 1) / 2;
  std::printf("consumer: q35 %s backend, sum = %.1f (expected %.1f)\n", Q35_BACKEND_NAME, out, want);
  return out == want ? 0 : 1;
}
