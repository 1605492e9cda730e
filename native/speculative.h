// Speculative decoding (issue 27): drafts from a request's own tokens (n-gram / prompt lookup,
// no second model), verified in the same llama_batch as every other sequence's decode step.
//
// Exactness: a draft is deterministic, so the speculative-sampling acceptance rule reduces to
// "sample each verified position with the request's own chain and keep going while the sample
// equals the draft token" (the draft distribution is one-hot). Each emitted token costs one
// Sample() call, exactly as without speculation, so seeded runs reproduce and penalties,
// grammars, markers, stops and maxTokens see the same token stream (Scheduler::VerifyDraft).
// Rejected cells leave the KV through Sequence::AcceptDraft. Memories that cannot drop a tail
// (recurrent, hybrid, window-only sliding window) do not speculate (Speculation::Start says why).
//
// This file holds the plain parts: the lookup, the acceptance evidence and the cost model that
// choose each draft's length. Plain C++.
#pragma once
#include <llama.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace llamux {

// Read from required keys of the context config (src/native-request.ts).
struct SpecConfig {
  int32_t mode = 0;           // 0 off, 1 n-gram, 2 draft model (draft_model.h)
  llama_model *draftModel = nullptr;  // mode 2 (kept alive by the native Context)
  uint32_t draftMax = 0;      // draft tokens per verification, at most
  bool adaptive = true;       // lengths from spec::CostModel and acceptance; else draftMax always
  uint32_t ngramMin = 0;      // shortest suffix looked up
  uint32_t ngramMax = 0;      // longest suffix looked up (tried first)
  uint32_t maxSequences = 0;  // no drafting while more sequences than this decode (compute-bound)
  uint32_t tickBudget = 0;    // draft tokens per tick, all sequences together
};

// One request's speculation state (Request::spec).
struct SpecState {
  std::vector<llama_token> draft;   // this tick's draft (verified after the decode)
  // Evidence on the chance that a draft token is accepted once the ones before it were:
  // decayed counts of accepted tokens and of rejections, starting from one of each (1/2).
  double kept = 1.0;
  double missed = 1.0;
};

namespace spec {

// The tokens that followed the most recent earlier occurrence of the last n tokens of
// `tokens` (n from ngramMax down to ngramMin; the longest match wins), at most `maxLen`.
// Empty when nothing matches.
void NgramDraft(const std::vector<llama_token> &tokens, uint32_t ngramMin, uint32_t ngramMax, size_t maxLen,
                std::vector<llama_token> *out);

// After a verification of `drafted` tokens of which `accepted` were kept: older evidence
// decays (acceptance changes along a reply: a copied file, then new text), this adds to it.
void Update(SpecState &s, size_t drafted, size_t accepted);
// A tick without a verification: the evidence drifts back toward the prior, so a request that
// stopped drafting (its drafts missed) tries again after a while, a short draft at first.
void Forget(SpecState &s);
// The chance that a draft token is kept, given the ones before it were.
double Acceptance(const SpecState &s);

// What a decode step costs, learnt from the steps this context ran: the recent mean time of
// steps of each size up to 64 rows (matrix kernels make it a staircase, not a line: on a 2-core
// CPU a Q8_0 target's 2-4 rows cost ~1.6 one-row steps, 5-8 rows ~2.8), and a least-squares
// line over them for sizes not seen yet (drawn toward a prior slope until steps of several
// sizes were seen); what a draft token costs to make (a draft model's decode; n-gram lookups
// cost nothing measurable).
class CostModel {
 public:
  static constexpr int32_t kMaxRows = 64;
  void ObserveStep(int32_t rows, double ms);
  void ObserveDraft(size_t positions, double ms);
  // Expected ms of a step of `rows` rows (0 before any step was seen).
  double StepMs(int32_t rows) const;
  double Fixed() const;
  double PerRow() const;
  double PerDraftToken() const { return draftMs_; }

 private:
  double w_ = 0, n_ = 0, t_ = 0, nn_ = 0, nt_ = 0;  // decayed sums of 1, rows, ms, rows^2, rows*ms
  double sum_[kMaxRows + 1] = {};                   // per size: decayed sums of ms and of 1
  double count_[kMaxRows + 1] = {};
  double draftMs_ = 0;
};

// The draft length, at most `maxLen`, that maximises the tick's expected tokens per ms:
// (tokens + gain(k)) / (StepMs(rows + k) + extraMs + k * perDraftToken), where gain(k) =
// a + a^2 + ... + a^k is the expected number of accepted draft tokens at acceptance a, and
// `tokens` / `rows` / `extraMs` what the tick yields, holds and costs besides the step so far.
// 0 when no draft pays for its rows.
size_t BestLength(double acceptance, size_t maxLen, double tokens, int32_t rows, double extraMs, const CostModel &cost);

}  // namespace spec
}  // namespace llamux
