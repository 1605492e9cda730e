// IdleKv: what the engine does with the KV of idle sequences.
//
// Out of the attention window (SpillTaxing). With a unified KV cache llama.cpp attends over
// every cell up to the highest one in use, so a conversation or prefix that sits idle in the
// cache widens the attention window of every token the other sequences decode (a 2,000-token
// idle session makes a short request's decode attend over 2,000 masked cells). While requests
// decode, idle sequences unused for `idleKvSpillMs` whose cells outnumber the running ones move
// to the RAM tier (sessions come back transparently, prefixes by lookup) and their cells are
// freed. Nothing is dropped unless the RAM tier took it. Off by default: the copy stalls the
// engine (~0.5 s for a 2,000-token state of the 250 M bench model), and llamux's llama.cpp patch
// fa-masked-kv already keeps masked cells from costing decode time (0.99x of no idle session,
// bench attention suite, idle-KV table).
//
// To disk (WriteDirty, cacheWriteThrough). The state copy-out takes the engine thread, so it
// runs only while nothing decodes, for sequences idle for kWriteThroughGraceMs, one at a time,
// stopping when a command arrives. The write itself is on the disk tier's I/O thread. Under
// continuous load a turn reaches disk at the next idle moment.
// Plain C++, engine thread only.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/request_state.h"

namespace llamux {

class CommandQueue;
class Gauges;
class Sessions;
class StateTiers;
struct CacheCounters;

class IdleKv {
 public:
  struct Deps {
    std::vector<Sequence> *sequences = nullptr;
    Sessions *sessions = nullptr;
    StateTiers *tiers = nullptr;
    Gauges *gauges = nullptr;
    CacheCounters *counters = nullptr;
    uint32_t spillMs = 0;  // idleKvSpillMs (0: never)
    bool unifiedKv = false;
  };
  explicit IdleKv(const Deps &d) : d_(d) {}

  // Grace period: a conversation's next turn that comes at once does not wait for a copy.
  static constexpr double kWriteThroughGraceMs = 300;

  void SpillTaxing(const std::vector<std::unique_ptr<Request>> &active);
  void WriteDirty(CommandQueue &queue);
  // A write-through state waits for a quiet moment.
  bool AnyDirty() const;

 private:
  Deps d_;
};

}  // namespace llamux
