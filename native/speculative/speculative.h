// Speculative decoding (issue 27): drafts from a request's own tokens (n-gram / prompt lookup,
// no second model), verified in the same llama_batch as every other sequence's decode step.
//
// Exactness: a draft is deterministic, so the speculative-sampling acceptance rule reduces to
// "sample each verified position with the request's own chain and keep going while the sample
// equals the draft token" (the draft distribution is one-hot). Each emitted token costs one
// Sample() call, exactly as without speculation, so seeded runs reproduce and penalties,
// grammars, markers, stops and maxTokens see the same token stream (Speculation::Verify).
// Rejected cells leave the KV through Sequence::AcceptDraft. Memories that cannot drop a tail
// (recurrent, hybrid, window-only sliding window) do not speculate (Speculation::Start says why).
//
// This file holds the plain parts: the lookup and the per-request length policy. Plain C++.
#pragma once
#include <llama.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llamux {

// Where drafts come from (the context option `speculative`).
enum class SpecMode : int32_t {
  Off = 0,
  Ngram = 1,  // the request's own tokens (ngram_drafter.h)
  Draft = 2,  // a smaller draft model (draft_model.h)
  Mtp = 3,    // the model's own multi-token-prediction block (mtp_draft.h)
};
const char *SpecModeName(SpecMode m);

// Read from required keys of the context config (src/native/request.ts).
struct SpecConfig {
  SpecMode mode = SpecMode::Off;
  llama_model *draftModel = nullptr;  // mode 2 (kept alive by the native Context)
  uint32_t draftMax = 0;      // draft tokens per verification, at most
  uint32_t ngramMin = 0;      // shortest suffix looked up
  uint32_t ngramMax = 0;      // longest suffix looked up (tried first)
  uint32_t maxSequences = 0;  // no drafting while more sequences than this decode (compute-bound)
  uint32_t tickBudget = 0;    // draft tokens per tick, all sequences together
  double draftCost = 0;       // one draft token's cost in decode steps (0: the mode's default)
};

// Decayed evidence of how often drafts agree with the model: tokens accepted, and misses (a
// verification that rejected a draft token). Its agreement estimate is the per-token chance
// that the next draft token stands (a geometric run: accepted / (accepted + misses)), pulled
// toward a prior while there is little evidence.
struct SpecEvidence {
  double accepted = 0;
  double misses = 0;
};

// One request's speculation state (Request::spec).
struct SpecState {
  std::vector<llama_token> draft;   // this tick's draft (verified after the decode)
  uint32_t backoff = 0;             // pause after the last decision not to draft (doubles)
  uint32_t skip = 0;                // ticks left to pause
  bool started = false;             // evidence taken from the context's (the first decision)
  SpecEvidence evidence;            // this request's, seeded from the context's
  bool off = false;                 // no more drafts (after a context shift the drafters' KV holds old positions)
};

namespace spec {

// The tokens that followed the most recent earlier occurrence of the last n tokens of
// `tokens` (n from ngramMax down to ngramMin; the longest match wins), at most `maxLen`.
// Empty when nothing matches.
void NgramDraft(const std::vector<llama_token> &tokens, uint32_t ngramMin, uint32_t ngramMax, size_t maxLen,
                std::vector<llama_token> *out);

// Draft lengths fill the CPU matrix kernels' tiles of kTileRows verified rows (the pending token
// and 3, 7, 11 ... drafts; speculative.cc says why). kTileCost: what each tile of verified rows
// costs, in plain decode steps, on top of the step (measured 0.9-1.0 on x86, 2 threads).
constexpr uint32_t kTileRows = 4;
constexpr uint32_t kFirstDraft = kTileRows - 1;
constexpr double kTileCost = 1.0;

// The per-token agreement that `e` suggests (0..1).
double Agreement(const SpecEvidence &e);

// The draft length (at most cfg.draftMax) that yields the most tokens per unit of decode cost at
// agreement `p` (drafting's own cost by cfg.mode), or 0 when no draft beats a plain step.
uint32_t BestLength(double p, const SpecConfig &cfg);

// One greedy draft step of a model drafter (draft model, MTP block): appends the argmax of
// `logits` to `draft` unless it is an end-of-generation token. True while the draft goes on
// (the token was taken and `maxLen` is not reached: it needs a decode for the next step).
bool GreedyStep(const float *logits, const llama_vocab *vocab, size_t maxLen, std::vector<llama_token> *draft);

// At a request's first drafting tick: its evidence starts as the context's (scaled down, so
// that its own verifications soon outweigh it) and a context whose drafts mostly miss starts
// the request paused.
void Start(SpecState &s, const SpecConfig &cfg, const SpecEvidence &context);

// At a drafting tick of a request that is not pausing (skip == 0): the length to draft now. 0
// when no draft pays at the estimated agreement: the request pauses (backoff > 0) for 1, 2, 4
// ... kMaxPause ticks, and the tick after a pause probes with one tile (evidence can only change
// by drafting). With n-gram drafts a paused request probes on matches of ngramMax tokens
// instead, whenever one turns up (Speculation::Plan).
constexpr uint32_t kMaxPause = 64;
uint32_t Decide(SpecState &s, const SpecConfig &cfg);

// After a verification of `drafted` tokens of which `accepted` were kept: both evidences.
void Update(SpecState &s, const SpecConfig &cfg, SpecEvidence &context, size_t drafted, size_t accepted);

}  // namespace spec
}  // namespace llamux
