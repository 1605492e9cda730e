// The RAM tier of saved sequence states, keyed by their token prefix. Lookups walk chained
// hashes of fixed-size token blocks (no scan of every entry), then extend the match token
// by token. A byte budget is enforced on every insert with LRU eviction; an entry larger
// than the whole budget is refused. An entry may be retained until a deadline (a prompt-cache
// breakpoint, prefix_retention.h): unretained entries are evicted first, retained ones only
// for another retained entry (the soonest deadline first). Plain C++, engine thread only.
#pragma once
#include <llama.h>

#include <chrono>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

namespace llamux {

// Chained hashes of whole `block`-token blocks: out[k] identifies tokens[0, (k+1)*block).
std::vector<uint64_t> ChainedBlockHashes(const std::vector<llama_token> &t, size_t block);

using BlockIndex = std::unordered_map<uint64_t, std::vector<uint64_t>>;

// Registers (or removes) entry `id` under every chained block hash of its tokens.
void IndexBlocks(BlockIndex *index, uint64_t id, const std::vector<llama_token> &tokens, size_t block, bool add);

// The entry of `entries` (a map id -> {tokens}) sharing the longest exact token prefix with
// `prompt`, among those sharing its longest run of whole blocks; nullptr if none.
template <typename Entries>
typename Entries::mapped_type *LongestPrefix(const BlockIndex &index, Entries &entries, const std::vector<llama_token> &prompt,
                                             size_t block, size_t *common) {
  *common = 0;
  const std::vector<uint64_t> *cands = nullptr;
  for (uint64_t h : ChainedBlockHashes(prompt, block)) {
    auto it = index.find(h);
    if (it == index.end()) break;
    cands = &it->second;
  }
  if (cands == nullptr) return nullptr;
  typename Entries::mapped_type *best = nullptr;
  for (uint64_t id : *cands) {
    auto it = entries.find(id);
    if (it == entries.end()) continue;
    const auto &t = it->second.tokens;
    size_t n = t.size() < prompt.size() ? t.size() : prompt.size(), c = 0;
    while (c < n && t[c] == prompt[c]) c++;  // verifies the hashes, then extends within the block
    if (c > *common) {
      *common = c;
      best = &it->second;
    }
  }
  return best;
}

using RetainClock = std::chrono::steady_clock;

struct CacheEntry {
  uint64_t id = 0;
  RetainClock::time_point retainUntil{};  // kept ahead of unretained entries until then
  std::vector<llama_token> tokens;  // the KV content the blob restores
  std::vector<uint8_t> blob;        // llama_state_seq_get_data output
  std::string session;              // non-empty: a spilled pinned session (not matched by prefix)
  std::list<uint64_t>::iterator lru;
  size_t Bytes() const { return blob.size() + tokens.size() * sizeof(llama_token) + 64; }
};

class RamTier {
 public:
  explicit RamTier(size_t budgetBytes, size_t blockSize = 16) : budget_(budgetBytes), block_(blockSize) {}

  // Inserts (replacing an entry with the same tokens or session). Evicts least recently
  // used unretained entries until it fits, then (for a retained insert) retained ones, the
  // soonest deadline first. Returns false (and stores or evicts nothing) when it cannot fit.
  bool Insert(std::vector<llama_token> tokens, std::vector<uint8_t> blob, const std::string &session = "",
              RetainClock::time_point retainUntil = {});
  // Extends the retention of the prefix entry holding exactly `tokens`; false when none does.
  bool Retain(const std::vector<llama_token> &tokens, RetainClock::time_point until);
  // The prefix entry sharing the longest common token prefix with `prompt` (at least one
  // whole block), or nullptr. `common` receives the shared length.
  CacheEntry *Lookup(const std::vector<llama_token> &prompt, size_t *common);
  CacheEntry *FindSession(const std::string &session);
  void Touch(CacheEntry *e);
  void Erase(uint64_t id);

  size_t Bytes() const { return bytes_; }
  size_t Budget() const { return budget_; }
  size_t Count() const { return entries_.size(); }
  size_t BlockSize() const { return block_; }
  uint64_t Evictions() const { return evictions_; }

 private:
  void Unindex(const CacheEntry &e);
  CacheEntry *FindExact(const std::vector<llama_token> &tokens);
  // Entries to evict so `need` more bytes fit once `replaced` (0: none) is gone too (empty and
  // false when they cannot).
  bool Victims(size_t need, uint64_t replaced, bool retained, RetainClock::time_point now, std::vector<uint64_t> *out) const;

  size_t budget_;
  size_t block_;
  size_t bytes_ = 0;
  uint64_t nextId_ = 1;
  uint64_t evictions_ = 0;
  std::unordered_map<uint64_t, CacheEntry> entries_;
  std::list<uint64_t> lru_;  // front: most recent
  BlockIndex index_;  // chained block hash -> entry ids
  std::unordered_map<std::string, uint64_t> sessions_;
};

}  // namespace llamux
