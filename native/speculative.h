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
// This file holds the plain parts: the lookup and the per-request length policy. Plain C++.
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
  uint32_t ngramMin = 0;      // shortest suffix looked up
  uint32_t ngramMax = 0;      // longest suffix looked up (tried first)
  uint32_t maxSequences = 0;  // no drafting while more sequences than this decode (compute-bound)
  uint32_t tickBudget = 0;    // draft tokens per tick, all sequences together
};

// One request's speculation state (Request::spec).
struct SpecState {
  std::vector<llama_token> draft;   // this tick's draft (verified after the decode)
  uint32_t length = 0;              // current draft length limit (adapts to acceptance)
  uint32_t backoff = 0;             // ticks without drafting after a fully rejected draft
  uint32_t skip = 0;                // ticks left to skip
};

namespace spec {

// The tokens that followed the most recent earlier occurrence of the last n tokens of
// `tokens` (n from ngramMax down to ngramMin; the longest match wins), at most `maxLen`.
// Empty when nothing matches.
void NgramDraft(const std::vector<llama_token> &tokens, uint32_t ngramMin, uint32_t ngramMax, size_t maxLen,
                std::vector<llama_token> *out);

// After a verification of `drafted` tokens of which `accepted` were kept: the next length (one
// tile of kTileRows verified rows more after a full acceptance, back to one tile otherwise:
// speculative.cc says why) and, after a draft that kept less than half, an exponential pause
// (so a workload that never agrees costs about one short verification every 32 tokens). A
// request's first draft fills one tile: a long draft that misses costs a long verification.
constexpr uint32_t kTileRows = 4;
constexpr uint32_t kFirstDraft = kTileRows - 1;
void Update(SpecState &s, const SpecConfig &cfg, size_t drafted, size_t accepted);

}  // namespace spec
}  // namespace llamux
