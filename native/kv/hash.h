// Small non-cryptographic hashing for fingerprints and cache keys (not for security).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace llamux {

struct Hash128 {
  uint64_t a = 0xcbf29ce484222325ULL;
  uint64_t b = 0x84222325cbf29ce4ULL;

  void Update(const void *data, size_t n) {
    const auto *p = static_cast<const uint8_t *>(data);
    for (size_t i = 0; i < n; i++) {
      a = (a ^ p[i]) * 0x100000001b3ULL;
      b = (b ^ p[i]) * 0x00000100000001b3ULL + 0x9e3779b97f4a7c15ULL;
      b ^= b >> 29;
    }
  }
  template <typename T>
  void UpdateValue(const T &v) { Update(&v, sizeof(v)); }
  void UpdateString(const std::string &s) {
    uint64_t n = s.size();
    UpdateValue(n);
    Update(s.data(), s.size());
  }
  std::string Hex() const {
    char buf[33];
    snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(a),
             static_cast<unsigned long long>(b));
    return buf;
  }
};

// The identity of a context's KV layout: model fingerprint, KV types, unified or split KV, the
// cells per sequence and the flash-attention setting (it decides V's transposition). The one
// place it is computed; the disk tier and JS prefix keys (ready event) both use it.
inline std::string LayoutKey(const std::string &modelFingerprint, int32_t typeK, int32_t typeV, bool unifiedKv,
                             int32_t sequenceContextSize, int32_t flashAttention) {
  Hash128 h;
  h.UpdateString(modelFingerprint);
  h.UpdateValue(typeK);
  h.UpdateValue(typeV);
  h.UpdateValue(unifiedKv);
  h.UpdateValue(sequenceContextSize);
  h.UpdateValue(flashAttention);
  return h.Hex();
}

}  // namespace llamux
