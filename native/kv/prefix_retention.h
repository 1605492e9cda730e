// Prompt-cache breakpoints (Anthropic `cache_control`, RequestParams::retain): the prompt's
// prefix up to each breakpoint is kept in the RAM and disk tiers until its deadline, a hint
// under the tiers' budgets (retained states are evicted after every unretained one). A prompt
// chunk stops at each breakpoint this request prefills, so the sequence holds exactly that
// prefix after the commit and its state is saved there; a breakpoint the request reused has
// the deadline of its saved state extended. What happened lands in the request's stats
// (retainedTokens, retainRefused). Plain C++, engine thread only; no state of its own.
#pragma once
#include <cstddef>

namespace llamux {

struct Request;
class StateTiers;

class PrefixRetention {
 public:
  explicit PrefixRetention(StateTiers *tiers) : tiers_(tiers) {}

  // A prompt chunk of `n` tokens from r.nPast, cut to end at the next breakpoint to save.
  static size_t Chunk(const Request &r, size_t n);
  // After placement (r.nPast: the reused tokens): breakpoints within them are refreshed.
  void Placed(Request &r);
  // After a commit: the breakpoint the sequence just reached is saved.
  void Committed(Request &r);

 private:
  StateTiers *tiers_;
};

}  // namespace llamux
