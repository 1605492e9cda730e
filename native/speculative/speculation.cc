#include "speculative/speculation.h"

#include <algorithm>

#include "engine/gauges.h"
#include "engine/request_state.h"
#include "engine/token_step.h"
#include "speculative/draft_model.h"
#include "speculative/mtp_draft.h"
#include "speculative/ngram_drafter.h"

namespace llamux {

Speculation::~Speculation() = default;

bool Speculation::Start(const SpecContext &c, std::string *error) {
  c_ = c;
  if (cfg_.mode == SpecMode::Off) return true;
  // Speculative decoding drops rejected draft cells from a sequence's tail: only memories that
  // can do that speculate (a recurrent state rolls back to llama.cpp's per-token snapshots).
  const bool canDropDrafts = c.canTruncate || c.rollback > 0;
  if (!canDropDrafts) {
    off_ = c.swaLimited ? "a window-only sliding-window cache (swaFull false) cannot drop rejected draft tokens"
                        : "this recurrent or hybrid architecture has no rollback snapshots in llama.cpp (its state has no per-token history)";
    return true;
  }
  std::string why;
  if (cfg_.mode == SpecMode::Draft) {
    auto d = std::make_unique<DraftModel>();
    if (!d->Start(cfg_.draftModel, c.model, c.contextSize, c.sequences, c.threads, &why)) {
      *error = "speculative draft model: " + why;
      return false;
    }
    drafter_ = std::move(d);
  } else if (cfg_.mode == SpecMode::Mtp) {
    // The trunk's h rows are read by batch row: llama.cpp keeps a batch's order only with one
    // KV stream (a unified KV).
    if (!c.unifiedKv) why = "it needs a unified KV (unifiedKv true)";
    auto m = std::make_unique<MtpDraft>();
    if (!why.empty() || !m->Start(c.model, c.ctx, c.contextSize, c.sequences, c.pools, &why)) {
      *error = "speculative mtp: " + why;
      return false;
    }
    drafter_ = std::move(m);
  } else {
    drafter_ = std::make_unique<NgramDrafter>(cfg_.ngramMin, cfg_.ngramMax);
  }
  if (cfg_.draftCost <= 0 && drafter_->StepCost() > 0) cfg_.draftCost = drafter_->StepCost();
  on_ = cfg_.draftMax > 0;
  return true;
}

void Speculation::Plan(const std::vector<std::unique_ptr<Request>> &active) {
  if (!on_) return;
  bool allowed = !noDraftTick_;
  noDraftTick_ = false;
  // A batch with many decoding sequences, or with prompt tokens, is compute-bound already: every
  // draft row would cost what a prompt row costs, more than the plain steps it may save.
  uint32_t decoders = 0;
  bool prefilling = false;
  for (auto &rp : active) {
    const Request &r = *rp;
    if (!r.Running() || r.Seq() == nullptr) continue;
    if (r.nGenerated > 0 && r.tokens.size() - r.nPast == 1) decoders++;
    if (r.tokens.size() - r.nPast > 1) prefilling = true;
  }
  allowed = allowed && !prefilling && decoders <= cfg_.maxSequences;
  size_t budget = cfg_.tickBudget;
  asked_.clear();
  for (auto &rp : active) {
    Request &r = *rp;
    r.spec.draft.clear();
    if (!allowed || budget == 0 || !r.p->speculative || r.spec.off || !r.Running() || r.Seq() == nullptr || r.nGenerated == 0 ||
        r.tokens.size() - r.nPast != 1) {
      continue;
    }
    // A model drafter (draft model, MTP) places its rows at token indices in a context of its
    // own: not past an M-RoPE image, whose positions differ from its length (Sequence::PosAt).
    // N-gram drafts are verified at the sequence's own positions (Batch::AddDraft).
    if (cfg_.mode != SpecMode::Ngram && r.Seq()->NextPos() != static_cast<llama_pos>(r.Seq()->Size())) continue;
    if (!r.spec.started) spec::Start(r.spec, cfg_, evidence_);
    // A paused request: with n-gram drafts only a match of ngramMax tokens probes (cheap to look
    // for every tick, and how copied spans start in the middle of fresh text; a short match is
    // what failed); a draft model probes after each pause (speculative.h).
    const bool longMatchOnly = cfg_.mode == SpecMode::Ngram && r.spec.backoff > 0 && cfg_.ngramMax >= 3;
    size_t maxLen;
    if (longMatchOnly) {
      maxLen = std::min<size_t>(cfg_.draftMax, spec::kFirstDraft);
    } else if (r.spec.skip > 0) {
      r.spec.skip--;
      continue;
    } else {
      maxLen = spec::Decide(r.spec, cfg_);
    }
    maxLen = std::min(maxLen, budget);
    // k drafts yield up to k + 1 tokens: never past maxTokens or the sequence's context.
    if (r.p->maxTokens >= 0) {
      int32_t left = r.p->maxTokens - r.nGenerated - 1;
      maxLen = std::min<size_t>(maxLen, static_cast<size_t>(std::max(0, left)));
    }
    size_t ctxLeft = c_.sequenceContextSize > r.nPast + 2 ? c_.sequenceContextSize - r.nPast - 2 : 0;
    maxLen = std::min(maxLen, ctxLeft);
    if (!c_.canTruncate) maxLen = std::min<size_t>(maxLen, c_.rollback);  // rolled back from snapshots
    if (maxLen == 0) continue;
    budget -= std::min(budget, drafter_->Ask(r, maxLen, longMatchOnly));
    asked_.push_back(&r);
  }
  drafter_->Flush();
  // A draft token a grammar refuses cannot be sampled: the draft stops before it.
  for (Request *r : asked_) r->spec.draft.resize(r->sampler.GrammarPrefix(r->spec.draft.data(), r->spec.draft.size()));
}

void Speculation::Verify(Request &r, TokenStepper &steps) {
  std::vector<llama_token> draft;
  draft.swap(r.spec.draft);
  const size_t k = draft.size();
  size_t accepted = 0;
  TokenStep st;
  // Row i holds the logits after the pending token and draft[0..i): sample it exactly as a
  // plain decode step would; the draft token stands while the sample equals it.
  for (size_t i = 0; i <= k; i++) {
    st = steps.Next(r, r.tick.logitIdx + static_cast<int32_t>(i));
    if (st.kind != TokenStep::Kind::Continue || i == k || st.tok != draft[i]) break;
    accepted++;
  }
  // The KV keeps the accepted drafts (the tokens now in r.tokens after the pending one); the
  // rejected cells leave before the request can end, so its sequence mirrors what it kept.
  r.Seq()->AcceptDraft(draft.data(), accepted);
  r.nPast = r.Seq()->Size();  // 0 when the memory could not drop them: recomputed from the prompt
  spec::Update(r.spec, cfg_, evidence_, k, accepted);
  r.stats.draftedTokens += static_cast<int32_t>(k);
  r.stats.acceptedTokens += static_cast<int32_t>(accepted);
  c_.counters->specVerifications++;
  c_.counters->specDrafted += k;
  c_.counters->specAccepted += accepted;
  if (st.kind != TokenStep::Kind::Continue) steps.End(r, st);
}

void Speculation::Committed(const llama_batch &batch, const std::vector<Request *> &members) {
  if (drafter_) drafter_->Committed(batch, members);
}

}  // namespace llamux
