// Consumer of the installed q35 package built the way a downstream project often is: CMake's
// default gnu++20 (GCC contracts a*b + c into FMAs there) and -march=native. Dequantizes the gguf-py
// goldens of every supported format through launch::dequant on the sim backend and checks them bit
// for bit (NaN matches any NaN: IEEE leaves payloads open). Usage: consumer_dequant GOLDEN_DIR
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

#include <q35/arch/memory.hpp>
#include <q35/launch/dequant.hpp>
#include <q35/quant/format_list.hpp>

namespace {

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

bool same_bits_or_both_nan(float a, float b) {
  if (a != a || b != b) return a != a && b != b;
  return std::memcmp(&a, &b, 4) == 0;
}

// Mismatching elements of format F's golden (-1 when the golden cannot be read or the launch fails).
template <class F>
int64_t check_format(const std::string& dir) {
  const std::vector<uint8_t> blocks = read_file(dir + "/" + F::name + ".blocks");
  const std::vector<uint8_t> raw = read_file(dir + "/" + F::name + ".f32");
  const int64_t n = int64_t(raw.size() / 4);
  if (n == 0 || blocks.size() != size_t(F::row_bytes(n))) return -1;
  std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  std::memcpy(want.data(), raw.data(), raw.size());
  q35::device_buffer<uint8_t> d_blocks;
  q35::device_buffer<float> d_out;
  q35::status s = d_blocks.allocate(blocks.size());
  if (s.ok()) s = d_out.allocate(size_t(n));
  if (s.ok()) s = d_blocks.upload(blocks.data(), blocks.size());
  if (s.ok()) s = q35::launch::dequant(uint32_t(F::id), d_blocks.data(), n, d_out.data());
  if (s.ok()) s = d_out.download(got.data(), size_t(n));
  if (s.ok()) s = q35::synchronize();
  if (!s.ok()) {
    std::fprintf(stderr, "consumer_dequant: %s: %s\n", F::name, s.to_string().c_str());
    return -1;
  }
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += !same_bits_or_both_nan(got[size_t(i)], want[size_t(i)]);
  std::printf("consumer_dequant: %-5s %7lld values, %lld differ\n", F::name, static_cast<long long>(n),
              static_cast<long long>(bad));
  return bad;
}

template <class... Formats>
bool check_all(const std::string& dir, q35::quant::format_list<Formats...>) {
  bool ok = true;
  ((ok = check_format<Formats>(dir) == 0 && ok), ...);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_dequant GOLDEN_DIR\n");
    return 2;
  }
#if defined(__FMA__)
  const char* fma = "yes";
#else
  const char* fma = "no";
#endif
#if defined(__STRICT_ANSI__)
  const char* gnu = "no";
#else
  const char* gnu = "yes";
#endif
  std::printf("consumer_dequant: GNU extensions %s, FMA target %s, C++ %ld\n", gnu, fma, long(__cplusplus));
  const bool ok = check_all(argv[1], q35::quant::supported_formats{});
  std::printf("consumer_dequant: %s\n", ok ? "every format bit-exact" : "MISMATCH");
  return ok ? 0 : 1;
}
