// Re-serialises a parsed GGUF file with edits (drop, rename, add tensors; set metadata), so the
// binding tests can make well-formed variants of the fixtures: tied embeddings, MTP tails, merged
// expert tensors, missing or extra tensors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "q35/io/gguf.hpp"

namespace q35::test {

struct gguf_rewriter {
  struct kv {
    std::string key;
    uint32_t type;
    std::string raw;  // the serialised value; for arrays: elem type, count, elements
  };
  struct tensor {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> ne;
    std::string data;
  };
  uint32_t version = 3;
  std::vector<kv> kvs;
  std::vector<tensor> tensors;

  explicit gguf_rewriter(const io::gguf_file& f) : version(f.version()) {
    for (const io::gguf_kv& k : f.metadata()) {
      std::string raw;
      if (k.type == io::gguf_type::array) {
        append(raw, uint32_t(k.elem_type));
        append(raw, k.count);
      }
      raw.append(reinterpret_cast<const char*>(k.value), k.value_bytes);
      kvs.push_back({std::string(k.key), uint32_t(k.type), raw});
    }
    for (const io::tensor_info& t : f.tensors())
      tensors.push_back({t.name, t.type, std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                         std::string(reinterpret_cast<const char*>(t.data), t.n_bytes)});
  }

  template <class T>
  static void append(std::string& s, T v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }

  void set_u32(const std::string& key, uint32_t v) {
    std::string raw;
    append(raw, v);
    for (auto& k : kvs)
      if (k.key == key) {
        k = {key, 4, raw};
        return;
      }
    kvs.push_back({key, 4, raw});
  }
  void set_u32_array(const std::string& key, const std::vector<uint32_t>& values) {
    std::string raw;
    append(raw, uint32_t(4));
    append(raw, uint64_t(values.size()));
    for (uint32_t v : values) append(raw, v);
    erase_kv(key);
    kvs.push_back({key, 9, raw});
  }
  void erase_kv(const std::string& key) {
    std::erase_if(kvs, [&](const kv& k) { return k.key == key; });
  }
  tensor* find(const std::string& name) {
    for (auto& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
  void erase_tensor(const std::string& name) {
    std::erase_if(tensors, [&](const tensor& t) { return t.name == name; });
  }
  // Adds a tensor of zeros of ggml type `type` with the given ne.
  void add_zero_tensor(const std::string& name, uint32_t type, std::vector<uint64_t> ne) {
    const io::ggml_type_traits* tr = io::find_ggml_type(type);
    uint64_t rows = 1;
    for (size_t d = 1; d < ne.size(); ++d) rows *= ne[d];
    tensors.push_back({name, type, ne, std::string(ne[0] / tr->block_elems * tr->block_bytes * rows, '\0')});
  }

  std::string bytes() const {
    std::string out = "GGUF";
    append(out, version);
    append(out, uint64_t(tensors.size()));
    append(out, uint64_t(kvs.size()));
    for (const kv& k : kvs) {
      append(out, uint64_t(k.key.size()));
      out += k.key;
      append(out, k.type);
      out += k.raw;
    }
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const tensor& t : tensors) {
      append(out, uint64_t(t.name.size()));
      out += t.name;
      append(out, uint32_t(t.ne.size()));
      for (uint64_t d : t.ne) append(out, d);
      append(out, t.type);
      append(out, offset);
      offsets.push_back(offset);
      offset = (offset + t.data.size() + 31) / 32 * 32;
    }
    out.resize((out.size() + 31) / 32 * 32, '\0');
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      out.resize(data_start + offsets[i], '\0');
      out += tensors[i].data;
    }
    return out;
  }
};

}  // namespace q35::test
