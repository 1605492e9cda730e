// Media positions in token lists. An image (or audio clip) becomes a run of pseudo token ids,
// one per embedding it is decoded into, derived from a hash of its decoded pixels (or samples)
// and of the projector: every path that compares or hashes token lists (live prefixes,
// sessions, the RAM and disk tiers, prefix keys) then keys on the media content for free.
// The ids are negative, far below -1 (LLAMA_TOKEN_NULL), so they never meet a vocabulary id;
// each holds 30 bits of the hash mixed with its index, so a run only compares equal to a run
// of the same media at the same place (a false match needs every position of it to collide).
#pragma once
#include <llama.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace llamux::media {

constexpr int32_t kMediaIdBits = 30;
// Every media id is in [INT32_MIN, kMediaIdLimit).
constexpr llama_token kMediaIdLimit = INT32_MIN + (1 << kMediaIdBits);

inline bool IsMediaToken(llama_token t) { return t < kMediaIdLimit; }

inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// The id of embedding `index` of the media whose content key is (k1, k2).
inline llama_token MediaTokenId(uint64_t k1, uint64_t k2, size_t index) {
  uint64_t h = Mix64(k1 ^ Mix64(k2 + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(index) + 1)));
  return static_cast<llama_token>(INT32_MIN + static_cast<int32_t>(h & ((1u << kMediaIdBits) - 1)));
}

// A fast 128-bit content hash of decoded pixels or samples, eight bytes at a time (a 12 MP
// image is 36 MB). Not cryptographic: it tells media apart, like the other cache keys.
struct ContentHash {
  uint64_t a = 0x243f6a8885a308d3ULL, b = 0x13198a2e03707344ULL;
  void Update(const void *data, size_t n) {
    const auto *p = static_cast<const unsigned char *>(data);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      a = Mix64(a ^ w) + 0x9e3779b97f4a7c15ULL;
      b = (b ^ w) * 0x100000001b3ULL + (a >> 17);
    }
    uint64_t tail = 0;
    for (size_t k = 0; i < n; i++, k++) tail |= static_cast<uint64_t>(p[i]) << (8 * k);
    a = Mix64(a ^ tail ^ (static_cast<uint64_t>(n) << 3));
    b = Mix64(b ^ a ^ static_cast<uint64_t>(n));
  }
  template <typename T>
  void UpdateValue(const T &v) { Update(&v, sizeof(v)); }
};

}  // namespace llamux::media
