// Speculative decoding in the scheduler (speculative.h has the why): PlanDrafts gives each
// decoding request a draft before the batch is built; after the decode, VerifyDraft walks the
// draft's rows with the request's own sampler and output path. Part of the Scheduler class.
#include <algorithm>

#include "engine/scheduler.h"

namespace llamux {

void Scheduler::PlanDrafts() {
  if (!spec_.on) return;
  bool allowed = !spec_.noDraftTick;
  spec_.noDraftTick = false;
  // A batch with many decoding sequences, or with prompt tokens, is compute-bound already: every
  // draft row would cost what a prompt row costs, more than the plain steps it may save.
  uint32_t decoders = 0;
  bool prefilling = false;
  for (auto &rp : active_) {
    const Request &r = *rp;
    if (r.done || r.paused || r.seq == nullptr) continue;
    if (r.nGenerated > 0 && r.tokens.size() - r.nPast == 1) decoders++;
    if (r.tokens.size() - r.nPast > 1) prefilling = true;
  }
  allowed = allowed && !prefilling && decoders <= cfg_.spec.maxSequences;
  size_t budget = cfg_.spec.tickBudget;
  std::vector<Request *> modelDrafts;  // mode "draft": drafted together below
  std::vector<size_t> modelLens;
  for (auto &rp : active_) {
    Request &r = *rp;
    r.spec.draft.clear();
    if (!allowed || budget == 0 || !r.p->speculative || r.done || r.paused || r.seq == nullptr || r.nGenerated == 0 ||
        r.tokens.size() - r.nPast != 1) {
      continue;
    }
    if (!r.spec.started) spec::Start(r.spec, cfg_.spec, spec_.evidence);
    // A paused request: with n-gram drafts only a match of ngramMax tokens probes (cheap to look
    // for every tick, and how copied spans start in the middle of fresh text; a short match is
    // what failed); a draft model probes after each pause (speculative.h).
    const bool longMatchOnly = cfg_.spec.mode == 1 && r.spec.backoff > 0 && cfg_.spec.ngramMax >= 3;
    size_t maxLen;
    if (longMatchOnly) {
      maxLen = std::min(cfg_.spec.draftMax, spec::kFirstDraft);
    } else if (r.spec.skip > 0) {
      r.spec.skip--;
      continue;
    } else {
      maxLen = spec::Decide(r.spec, cfg_.spec);
    }
    maxLen = std::min(maxLen, budget);
    // k drafts yield up to k + 1 tokens: never past maxTokens or the sequence's context.
    if (r.p->maxTokens >= 0) {
      int32_t left = r.p->maxTokens - r.nGenerated - 1;
      maxLen = std::min<size_t>(maxLen, static_cast<size_t>(std::max(0, left)));
    }
    size_t ctxLeft = sequenceContextSize_ > r.nPast + 2 ? sequenceContextSize_ - r.nPast - 2 : 0;
    maxLen = std::min(maxLen, ctxLeft);
    if (!canTruncate_) maxLen = std::min<size_t>(maxLen, rollback_);  // rolled back from snapshots
    if (maxLen == 0) continue;
    if (draft_ || mtp_) {
      modelDrafts.push_back(&r);
      modelLens.push_back(maxLen);
      budget -= maxLen;
      continue;
    }
    spec::NgramDraft(r.tokens, longMatchOnly ? cfg_.spec.ngramMax : cfg_.spec.ngramMin, cfg_.spec.ngramMax, maxLen, &r.spec.draft);
    // A draft token a grammar refuses cannot be sampled: the draft stops before it (the
    // grammars already took the pending token when it was sampled or forced).
    r.spec.draft.resize(r.sampler.GrammarPrefix(r.spec.draft.data(), r.spec.draft.size()));
    budget -= r.spec.draft.size();
  }
  if (!modelDrafts.empty()) {
    if (mtp_) mtp_->Draft(modelDrafts, modelLens);
    else draft_->Draft(modelDrafts, modelLens);
    for (Request *r : modelDrafts) r->spec.draft.resize(r->sampler.GrammarPrefix(r->spec.draft.data(), r->spec.draft.size()));
  }
}

void Scheduler::VerifyDraft(Request &r) {
  std::vector<llama_token> draft;
  draft.swap(r.spec.draft);
  const size_t k = draft.size();
  size_t accepted = 0;
  TokenStep st;
  // Row i holds the logits after the pending token and draft[0..i): sample it exactly as a
  // plain decode step would; the draft token stands while the sample equals it.
  for (size_t i = 0; i <= k; i++) {
    st = NextToken(r, r.tick.logitIdx + static_cast<int32_t>(i));
    if (st.kind != TokenStep::Kind::Continue || i == k || st.tok != draft[i]) break;
    accepted++;
  }
  // The KV keeps the accepted drafts (the tokens now in r.tokens after the pending one); the
  // rejected cells leave before the request can end, so its sequence mirrors what it kept.
  r.seq->AcceptDraft(draft.data(), accepted);
  r.nPast = r.seq->Size();  // 0 when the memory could not drop them: recomputed from the prompt
  spec::Update(r.spec, cfg_.spec, spec_.evidence, k, accepted);
  r.stats.draftedTokens += static_cast<int32_t>(k);
  r.stats.acceptedTokens += static_cast<int32_t>(accepted);
  counters_.specVerifications++;
  counters_.specDrafted += k;
  counters_.specAccepted += accepted;
  if (st.kind != TokenStep::Kind::Continue) EndStep(r, st);
}

}  // namespace llamux
