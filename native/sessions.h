// Sessions: named conversations whose KV stays pinned to one sequence between requests.
// The SessionTable is the one owner of the session <-> sequence link: a session knows its
// sequence and a sequence knows its session, and only Pin/Unpin/Erase change either side.
// Plain C++, engine thread only.
#pragma once
#include <llama.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "request.h"

namespace llamux {

struct SessionState {
  std::vector<llama_token> transcript;  // committed tokens (prompt + generated, no EOG)
  int32_t sequence = -1;                // pinned sequence, or -1 (spilled to RAM, or cold)
  Clock::time_point lastUsed;
  bool busy = false;
  bool endAfter = false;  // end() arrived while a request ran: end when it finishes
  int64_t ttlMs = -1;     // idle TTL; -1: the context's default
  std::string scope;      // cache scope of its requests (a fork inherits it)
};

class SessionTable {
 public:
  explicit SessionTable(size_t nSequences) : pinnedTo_(nSequences) {}

  SessionState *Find(const std::string &id);
  SessionState &Create(const std::string &id);  // or the existing one

  // Links a session and a sequence (dropping any link either had before).
  void Pin(const std::string &id, int32_t sequence);
  // Unlinks a sequence from its session; the session stays (spilled or cold).
  void Unpin(int32_t sequence);
  // Forgets a session; its sequence (if any) becomes an ordinary cache.
  void Erase(const std::string &id);

  // The session a sequence is pinned to; empty when it is free for anyone.
  const std::string &PinnedTo(int32_t sequence) const { return pinnedTo_[static_cast<size_t>(sequence)]; }
  bool IsPinned(int32_t sequence) const { return !PinnedTo(sequence).empty(); }

  // Idle sessions unused for longer than their TTL (defaultTtlMs unless they set one).
  std::vector<std::string> Expired(Clock::time_point now, uint32_t defaultTtlMs) const;

  size_t Size() const { return sessions_.size(); }
  size_t PinnedCount() const;

 private:
  std::unordered_map<std::string, SessionState> sessions_;
  std::vector<std::string> pinnedTo_;  // by sequence index
};

}  // namespace llamux
