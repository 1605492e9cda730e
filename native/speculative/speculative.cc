#include "speculative/speculative.h"

#include <algorithm>
#include <cmath>

namespace llamux {
namespace spec {

void NgramDraft(const std::vector<llama_token> &tokens, uint32_t ngramMin, uint32_t ngramMax, size_t maxLen,
                std::vector<llama_token> *out) {
  out->clear();
  const size_t size = tokens.size();
  if (maxLen == 0 || ngramMin == 0 || size < 2) return;
  for (size_t n = std::min<size_t>(ngramMax, size - 1); n >= ngramMin && n >= 1; n--) {
    if (size < n + 1) continue;
    const llama_token *key = tokens.data() + size - n;
    // Newest first: recent text (this turn's output, the latest file contents) predicts best.
    for (size_t start = size - n; start-- > 0;) {
      if (tokens[start] != key[0] || !std::equal(key, key + n, tokens.begin() + static_cast<long>(start))) continue;
      size_t from = start + n;  // < size: start < size - n
      size_t len = std::min(maxLen, size - from);
      out->assign(tokens.begin() + static_cast<long>(from), tokens.begin() + static_cast<long>(from + len));
      return;
    }
    if (n == 1) break;
  }
}

// A prior of 2 accepted tokens and 1 miss (agreement 2/3): a request with no evidence drafts
// one tile, and two early misses are enough to pause it.
static constexpr double kPriorAccepted = 2.0;
static constexpr double kPriorMisses = 1.0;
// Evidence fades by these factors per verification: a request follows its text's changes
// (fresh text, then a copied span) within a few verifications; a context keeps a longer memory.
static constexpr double kRequestDecay = 0.8;
static constexpr double kContextDecay = 0.95;
// A new request takes at most this much of its context's evidence (in tokens and misses).
static constexpr double kContextWeight = 6.0;
// Drafting's own cost per draft token, in decode steps: a lookup costs next to nothing; a draft
// model's step, on the bench's scripted pair, about 0.25 ms against a 7 ms target step.
// An MTP block's step runs a block and the output head (MtpDraft::StepCost estimates it from
// the model's shapes). The option speculative.draftCost overrides any of them.
static double DraftTokenCost(const SpecConfig &cfg) {
  if (cfg.draftCost > 0) return cfg.draftCost;
  return cfg.mode == SpecMode::Draft ? 0.035 : 0.005;
}

bool GreedyStep(const float *logits, const llama_vocab *vocab, size_t maxLen, std::vector<llama_token> *draft) {
  const int32_t nVocab = llama_vocab_n_tokens(vocab);
  llama_token best = static_cast<llama_token>(std::max_element(logits, logits + nVocab) - logits);
  if (llama_vocab_is_eog(vocab, best)) return false;
  draft->push_back(best);
  return draft->size() < maxLen;  // the last draft token needs no decode
}

double Agreement(const SpecEvidence &e) {
  return (e.accepted + kPriorAccepted) / (e.accepted + e.misses + kPriorAccepted + kPriorMisses);
}

uint32_t BestLength(double p, const SpecConfig &cfg) {
  const uint32_t draftMax = cfg.draftMax;
  // Lengths fill the CPU matrix kernels' tiles of 4 activation rows (the pending token and 3, 7,
  // 11 ... drafts): on x86 llamafile's sgemm computes a 5-row verification as a 4-row tile and a
  // 1-row one, and a tile's rows cost little more than one row while the next tile costs nearly
  // a step (bench speculative: 1-row step 6.4-6.9 ms, 2-4 rows 11.9-13.5 ms, 5-8 rows 18.2-20.5
  // ms, 9-12 rows 24.5 ms on the scripted 170 M target, 2 threads). A draft of k tokens at
  // per-token agreement p yields (1 - p^(k+1)) / (1 - p) tokens; the best length is the one with
  // the most tokens per cost, and none when a plain step (1 token per step) does better.
  double best = 1.0;
  uint32_t bestLen = 0;
  for (uint32_t k = std::min(kFirstDraft, draftMax); k >= 1 && k <= draftMax;) {
    double tokens = p >= 1.0 ? k + 1.0 : (1.0 - std::pow(p, k + 1)) / (1.0 - p);
    double cost = 1.0 + kTileCost * std::ceil((k + 1) / static_cast<double>(kTileRows)) + DraftTokenCost(cfg) * k;
    if (tokens / cost > best * 1.01) {
      best = tokens / cost;
      bestLen = k;
    }
    if (k == draftMax) break;
    k = std::min(draftMax, k + kTileRows);
  }
  return bestLen;
}

void Start(SpecState &s, const SpecConfig &cfg, const SpecEvidence &context) {
  s.started = true;
  double weight = context.accepted + context.misses;
  double scale = weight > kContextWeight ? kContextWeight / weight : 1.0;
  s.evidence = {context.accepted * scale, context.misses * scale};
  // A context whose drafts mostly missed: the request starts paused, and probes after it.
  if (BestLength(Agreement(s.evidence), cfg) == 0) {
    s.backoff = 16;
    s.skip = s.backoff;
  }
}

uint32_t Decide(SpecState &s, const SpecConfig &cfg) {
  if (s.backoff > 0) return std::min(cfg.draftMax, kFirstDraft);  // a pause ended: probe
  uint32_t k = BestLength(Agreement(s.evidence), cfg);
  if (k == 0) {
    s.backoff = 1;
    s.skip = s.backoff;
  }
  return k;
}

void Update(SpecState &s, const SpecConfig &cfg, SpecEvidence &context, size_t drafted, size_t accepted) {
  const double miss = accepted < drafted ? 1.0 : 0.0;
  s.evidence.accepted = s.evidence.accepted * kRequestDecay + static_cast<double>(accepted);
  s.evidence.misses = s.evidence.misses * kRequestDecay + miss;
  context.accepted = context.accepted * kContextDecay + static_cast<double>(accepted);
  context.misses = context.misses * kContextDecay + miss;
  if (s.backoff == 0) return;
  // Paused (this was a probe): drafting resumes when the evidence says it pays; otherwise the
  // next pause is twice as long.
  if (BestLength(Agreement(s.evidence), cfg) > 0) {
    s.backoff = 0;
    s.skip = 0;
  } else {
    s.backoff = std::min(kMaxPause, s.backoff * 2);
    s.skip = s.backoff;
  }
}

}  // namespace spec

const char *SpecModeName(SpecMode m) {
  switch (m) {
    case SpecMode::Ngram: return "ngram";
    case SpecMode::Draft: return "draft";
    case SpecMode::Mtp: return "mtp";
    case SpecMode::Off: break;
  }
  return "off";
}

}  // namespace llamux
