#include "sessions.h"

#include <chrono>

namespace llamux {

SessionState *SessionTable::Find(const std::string &id) {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : &it->second;
}

SessionState &SessionTable::Create(const std::string &id) { return sessions_[id]; }

void SessionTable::Pin(const std::string &id, int32_t sequence) {
  SessionState &s = sessions_[id];
  if (s.sequence == sequence && PinnedTo(sequence) == id) return;
  if (s.sequence >= 0) pinnedTo_[static_cast<size_t>(s.sequence)].clear();
  Unpin(sequence);
  s.sequence = sequence;
  pinnedTo_[static_cast<size_t>(sequence)] = id;
}

void SessionTable::Unpin(int32_t sequence) {
  std::string &owner = pinnedTo_[static_cast<size_t>(sequence)];
  if (owner.empty()) return;
  auto it = sessions_.find(owner);
  if (it != sessions_.end()) it->second.sequence = -1;
  owner.clear();
}

void SessionTable::Erase(const std::string &id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  if (it->second.sequence >= 0) pinnedTo_[static_cast<size_t>(it->second.sequence)].clear();
  sessions_.erase(it);
}

std::vector<std::string> SessionTable::Expired(Clock::time_point now, uint32_t defaultTtlMs) const {
  std::vector<std::string> out;
  for (const auto &kv : sessions_) {
    double idle = std::chrono::duration<double, std::milli>(now - kv.second.lastUsed).count();
    double ttl = kv.second.ttlMs >= 0 ? static_cast<double>(kv.second.ttlMs) : defaultTtlMs;
    if (!kv.second.busy && idle > ttl) out.push_back(kv.first);
  }
  return out;
}

size_t SessionTable::PinnedCount() const {
  size_t n = 0;
  for (const auto &s : pinnedTo_) n += s.empty() ? 0 : 1;
  return n;
}

}  // namespace llamux
