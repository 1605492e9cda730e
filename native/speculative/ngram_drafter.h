// NgramDrafter: drafts from the request's own tokens (prompt lookup): the tokens that followed
// the most recent earlier occurrence of its last n tokens (spec::NgramDraft). No second model,
// no state. Plain C++.
#pragma once
#include <cstdint>

#include "speculative/drafter.h"

namespace llamux {

class NgramDrafter : public Drafter {
 public:
  NgramDrafter(uint32_t ngramMin, uint32_t ngramMax) : min_(ngramMin), max_(ngramMax) {}
  // A pausing request (longMatchOnly) drafts only on a match of ngramMax tokens.
  size_t Ask(Request &r, size_t maxLen, bool longMatchOnly) override;

 private:
  uint32_t min_, max_;
};

}  // namespace llamux
