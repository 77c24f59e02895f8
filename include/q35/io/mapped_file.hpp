// A read-only, move-only POSIX memory mapping of a whole file.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace q35::io {

class mapped_file {
 public:
  mapped_file() = default;
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  mapped_file(mapped_file&& o) noexcept { swap(o); }
  mapped_file& operator=(mapped_file&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~mapped_file() { release(); }

  // Maps `path` read-only. Throws std::runtime_error naming the path and the OS error. An empty
  // file gives an empty mapping (data() == nullptr, size() == 0).
  static mapped_file open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    mapped_file m;
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      throw std::runtime_error(path + ": cannot stat: " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw std::runtime_error(path + ": not a regular file");
    }
    m.size_ = uint64_t(st.st_size);
    if (m.size_ > 0) {
      void* p = ::mmap(nullptr, size_t(m.size_), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        ::close(fd);
        throw std::runtime_error(path + ": cannot mmap " + std::to_string(m.size_) + " bytes: " + std::strerror(e));
      }
      m.data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);  // the mapping stays valid after the descriptor is closed
    return m;
  }

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  void swap(mapped_file& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
  }
  void release() noexcept {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_t(size_));
    data_ = nullptr;
    size_ = 0;
  }

  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace q35::io
