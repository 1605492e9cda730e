// Tool-call span detection by token sequence. A sampled token that could begin a marker
// is held back until the marker completes (a span opens or closes) or cannot complete
// (the held tokens are released, in order, as ordinary content). Matching works across
// ticks and with overlapping prefixes: after a mismatch the longest held suffix that is
// still a marker prefix stays held.
#pragma once
#include <llama.h>

#include <vector>

namespace llamux {

struct MarkerSet {
  std::vector<llama_token> start, end, payloadStart, payloadEnd;  // empty: not configured
  bool Enabled() const { return !start.empty() && !end.empty(); }
  bool HasPayload() const { return !payloadStart.empty() && !payloadEnd.empty(); }
};

class MarkerMatcher {
 public:
  enum class Region { Text, Wrapper, Payload };
  enum class Kind { Text, Body, Open, Close, PayloadOpen, PayloadClose };
  struct Output {
    Kind kind;
    std::vector<llama_token> tokens;
  };

  explicit MarkerMatcher(const MarkerSet *markers) : m_(markers) {}

  // Feeds one token; appends what it releases, in order.
  void Push(llama_token t, std::vector<Output> *out);
  // Releases every held token (end of generation).
  void Flush(std::vector<Output> *out);

  Region region() const { return region_; }
  // Starts inside a span (a reasoning span the prompt already opened).
  void StartInside() { region_ = Region::Wrapper; }
  // Tokens held back as a possible marker prefix.
  size_t HeldSize() const { return held_.size(); }
  bool Holding() const { return !held_.empty(); }
  // The wrapper syntax (markers and everything in a span outside payloads) is sampled greedily.
  bool WantsGreedy() const { return region_ == Region::Wrapper || !held_.empty(); }

 private:
  void Release(size_t n, std::vector<Output> *out);
  void Candidates(std::vector<const std::vector<llama_token> *> *c) const;

  const MarkerSet *m_;
  Region region_ = Region::Text;
  std::vector<llama_token> held_;
};

}  // namespace llamux
