#include "kv/ram_tier.h"

#include <algorithm>

namespace llamux {

std::vector<uint64_t> ChainedBlockHashes(const std::vector<llama_token> &t, size_t block_) {
  std::vector<uint64_t> out;
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (size_t b = 0; (b + 1) * block_ <= t.size(); b++) {
    for (size_t i = b * block_; i < (b + 1) * block_; i++) {
      h ^= static_cast<uint64_t>(static_cast<uint32_t>(t[i])) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h *= 0xff51afd7ed558ccdULL;
    }
    out.push_back(h);
  }
  return out;
}

void IndexBlocks(BlockIndex *index, uint64_t id, const std::vector<llama_token> &tokens, size_t block, bool add) {
  for (uint64_t h : ChainedBlockHashes(tokens, block)) {
    if (add) {
      (*index)[h].push_back(id);
      continue;
    }
    auto it = index->find(h);
    if (it == index->end()) continue;
    auto &v = it->second;
    v.erase(std::remove(v.begin(), v.end(), id), v.end());
    if (v.empty()) index->erase(it);
  }
}

void RamTier::Unindex(const CacheEntry &e) {
  if (e.session.empty()) IndexBlocks(&index_, e.id, e.tokens, block_, false);
}

void RamTier::Erase(uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  CacheEntry &e = it->second;
  Unindex(e);
  if (!e.session.empty()) sessions_.erase(e.session);
  lru_.erase(e.lru);
  bytes_ -= e.Bytes();
  entries_.erase(it);
}

bool RamTier::Insert(std::vector<llama_token> tokens, std::vector<uint8_t> blob, const std::string &session) {
  CacheEntry e;
  e.tokens = std::move(tokens);
  e.blob = std::move(blob);
  e.session = session;
  size_t need = e.Bytes();
  if (need > budget_) return false;
  // Replace an entry holding the same session or the same tokens.
  if (!session.empty()) {
    auto s = sessions_.find(session);
    if (s != sessions_.end()) Erase(s->second);
  } else if (!e.tokens.empty()) {
    size_t common = 0;
    CacheEntry *same = Lookup(e.tokens, &common);
    if (same != nullptr && common == e.tokens.size() && same->tokens.size() == e.tokens.size()) Erase(same->id);
  }
  while (bytes_ + need > budget_ && !lru_.empty()) {
    Erase(lru_.back());
    evictions_++;
  }
  e.id = nextId_++;
  lru_.push_front(e.id);
  e.lru = lru_.begin();
  bytes_ += need;
  if (session.empty()) {
    IndexBlocks(&index_, e.id, e.tokens, block_, true);
  } else {
    sessions_[session] = e.id;
  }
  entries_.emplace(e.id, std::move(e));
  return true;
}

CacheEntry *RamTier::Lookup(const std::vector<llama_token> &prompt, size_t *common) {
  return LongestPrefix(index_, entries_, prompt, block_, common);
}

CacheEntry *RamTier::FindSession(const std::string &session) {
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return nullptr;
  auto it = entries_.find(s->second);
  return it == entries_.end() ? nullptr : &it->second;
}

void RamTier::Touch(CacheEntry *e) {
  lru_.erase(e->lru);
  lru_.push_front(e->id);
  e->lru = lru_.begin();
}

}  // namespace llamux
