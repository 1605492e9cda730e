// Sessions: named conversations whose KV stays pinned to one sequence between requests.
//   SessionTable  the one owner of the session <-> sequence link: a session knows its
//                 sequence and a sequence knows its session (Sequence::Session()), and only
//                 Pin/Unpin/Erase change either side.
//   Sessions      what a session does: prepare a request on it (busy, continue, expect), join
//                 and leave a sequence, end, fork, expire, spill to the RAM tier, forget.
// Admission (admission.cc) resolves a request's session handle once and hands the SessionState
// on; nothing below looks the id up again. Plain C++, engine thread only.
#pragma once
#include <llama.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request_state.h"
#include "kv/sequence.h"

namespace llamux {

class Output;
class StateTiers;
struct CacheCounters;

// The RAM tier's key of a spilled session's state.
inline std::string SessionKey(SessionHandle h) { return "session#" + std::to_string(h); }

struct SessionState {
  SessionHandle handle = 0;
  std::string name;  // for messages
  std::vector<llama_token> transcript;  // committed tokens (prompt + generated, no EOG)
  int32_t sequence = -1;                // pinned sequence, or -1 (spilled to RAM, or cold)
  Clock::time_point lastUsed;
  bool busy = false;
  bool endAfter = false;  // end() arrived while a request ran: end when it finishes
  int64_t ttlMs = -1;     // idle TTL; -1: the context's default
  std::string scope;      // cache scope of its requests (a fork inherits it)
  size_t exact = SIZE_MAX;  // its KV's exact prefix after a context shift (Sequence::ExactPrefix)
};

class SessionTable {
 public:
  explicit SessionTable(std::vector<Sequence> *sequences = nullptr) : sequences_(sequences) {}

  SessionState *Find(SessionHandle h);
  SessionState &Create(SessionHandle h, const std::string &name);  // or the existing one

  // Links a session and a sequence (dropping any link either had before).
  void Pin(SessionState &s, Sequence &seq);
  // Unlinks a sequence from its session; the session stays (spilled or cold).
  void Unpin(Sequence &seq);
  // Forgets a session; its sequence (if any) becomes an ordinary cache.
  void Erase(SessionHandle h);

  // Idle sessions unused for longer than their TTL (defaultTtlMs unless they set one).
  std::vector<SessionHandle> Expired(Clock::time_point now, uint32_t defaultTtlMs) const;

  size_t Size() const { return sessions_.size(); }
  size_t PinnedCount() const;

 private:
  Sequence &At(int32_t index) { return (*sequences_)[static_cast<size_t>(index)]; }

  std::vector<Sequence> *sequences_;
  std::unordered_map<SessionHandle, SessionState> sessions_;
};

class Sessions {
 public:
  struct Deps {
    std::vector<Sequence> *sequences = nullptr;
    StateTiers *tiers = nullptr;
    CacheCounters *counters = nullptr;
    Output *output = nullptr;
    uint32_t defaultTtlMs = 0;
    uint32_t sequenceContextSize = 0;
  };
  Sessions() = default;
  explicit Sessions(const Deps &deps) : d_(deps), table_(deps.sequences) {}

  SessionState *Find(SessionHandle h) { return table_.Find(h); }
  size_t Size() const { return table_.Size(); }
  size_t PinnedCount() const { return table_.PinnedCount(); }

  // ---- a generation on a session ----------------------------------------------------
  // Resolves the request's session: the one lookup of its id (*sess: nullptr when it has
  // none or it is new; a preempted request keeps the state it joined). Checks busy /
  // continue / expect and, for continue(), puts the committed tokens before the request's
  // tail. Placed when the request may go on; Wait; Done after a failure event.
  Placement Prepare(Request &r, SessionState **sess);
  // The request takes `seq` for its session (created when new); marks it busy.
  void Join(Request &r, Sequence &seq);
  // The request leaves its session's sequence: the session is idle again, with the request's
  // tokens committed when `committed`; an end() that waited for it runs now.
  void Leave(Request &r, const Sequence &seq, bool committed);
  // A preempted request gives its sequence up; the session stays busy.
  void Yield(Sequence &seq) { table_.Unpin(seq); }

  // ---- session commands -------------------------------------------------------------
  // end(): forgets the session now, or when its running request finishes.
  void End(SessionHandle h);
  // fork(): Placed when the copy may go ahead (*from set), Wait, or Done after a failure event.
  Placement CheckFork(const Request &r, SessionState **from);
  // Makes `target` (free, any old KV saved) hold `from`'s KV and pins a new session to it.
  void Fork(const Request &r, const SessionState &from, Sequence &target);
  // No sequence is free for the fork: it starts spilled, its state a copy of `from`'s in the RAM
  // tier (restored when it runs). False, with nothing created, when the RAM tier cannot hold it.
  bool ForkToRam(const Request &r, const SessionState &from);

  // ---- keeping the table small ------------------------------------------------------
  // When every sequence is pinned: the least recently used idle session (not `keep`) moves
  // to the RAM tier and its sequence is returned empty; nullptr when there is none.
  Sequence *SpillIdle(const SessionState *keep);
  // Moves an idle pinned sequence's session to the RAM tier and empties the sequence
  // (idle-KV spill). False when the RAM tier did not take it: the KV and the pin stay.
  bool Spill(Sequence &seq);
  // Forgets the sessions idle past their TTL (checked at most once a second). The count.
  size_t Expire();
  void Forget(SessionHandle h);

 private:
  Deps d_;
  SessionTable table_;
  Clock::time_point lastExpiry_ = Clock::now();
};

}  // namespace llamux
