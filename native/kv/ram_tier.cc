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

bool RamTier::Victims(size_t need, uint64_t replaced, bool retained, RetainClock::time_point now,
                      std::vector<uint64_t> *out) const {
  size_t freed = replaced != 0 ? entries_.at(replaced).Bytes() : 0;
  auto enough = [&] { return bytes_ - freed + need <= budget_; };
  // least recently used first, retained entries skipped
  for (auto it = lru_.rbegin(); it != lru_.rend() && !enough(); ++it) {
    const CacheEntry &e = entries_.at(*it);
    if (e.id == replaced || e.retainUntil > now) continue;
    out->push_back(e.id);
    freed += e.Bytes();
  }
  if (!enough() && retained) {
    std::vector<const CacheEntry *> kept;
    for (const auto &kv : entries_) {
      if (kv.first != replaced && kv.second.retainUntil > now) kept.push_back(&kv.second);
    }
    std::sort(kept.begin(), kept.end(), [](const CacheEntry *a, const CacheEntry *b) { return a->retainUntil < b->retainUntil; });
    for (size_t i = 0; i < kept.size() && !enough(); i++) {
      out->push_back(kept[i]->id);
      freed += kept[i]->Bytes();
    }
  }
  if (!enough()) out->clear();
  return enough();
}

bool RamTier::Insert(std::vector<llama_token> tokens, std::vector<uint8_t> blob, const std::string &session,
                     RetainClock::time_point retainUntil) {
  CacheEntry e;
  e.tokens = std::move(tokens);
  e.blob = std::move(blob);
  e.session = session;
  e.retainUntil = retainUntil;
  size_t need = e.Bytes();
  if (need > budget_) return false;
  // Replace an entry holding the same session or the same tokens (its retention carries over).
  uint64_t same = 0;
  if (!session.empty()) {
    auto s = sessions_.find(session);
    if (s != sessions_.end()) same = s->second;
  } else if (CacheEntry *x = FindExact(e.tokens)) {
    same = x->id;
  }
  if (same != 0) e.retainUntil = std::max(e.retainUntil, entries_.at(same).retainUntil);
  const RetainClock::time_point now = RetainClock::now();
  std::vector<uint64_t> victims;
  if (!Victims(need, same, e.retainUntil > now, now, &victims)) return false;
  if (same != 0) Erase(same);
  for (uint64_t id : victims) {
    Erase(id);
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

CacheEntry *RamTier::FindExact(const std::vector<llama_token> &tokens) {
  std::vector<uint64_t> hashes = ChainedBlockHashes(tokens, block_);
  if (hashes.empty()) return nullptr;
  auto it = index_.find(hashes.back());
  if (it == index_.end()) return nullptr;
  for (uint64_t id : it->second) {
    auto e = entries_.find(id);
    if (e != entries_.end() && e->second.tokens == tokens) return &e->second;
  }
  return nullptr;
}

bool RamTier::Retain(const std::vector<llama_token> &tokens, RetainClock::time_point until) {
  CacheEntry *e = FindExact(tokens);
  if (e == nullptr) return false;
  e->retainUntil = std::max(e->retainUntil, until);
  Touch(e);
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
