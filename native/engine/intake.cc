// Intake: the commands JS queued (Scheduler::Submit/Cancel/SetPaused) reach the engine
// thread here. A new request (token ids: JS tokenizes, src/engine/prompt-tokens.ts) is checked before it waits for
// admission; a cancel ends a waiting or running request; a pause holds a running one out of
// the batch. Part of the Scheduler class (scheduler.h).
#include "engine/scheduler.h"

namespace llamux {

bool Scheduler::InitToolGrammar(Request &r, std::string *error) {
  const RequestParams &p = *r.p;
  if (p.toolGrammar.empty() || !cfg_.markers.Enabled() || !p.detectToolCalls) return true;
  llama_sampler *g = grammars_.Get(vocab_, p.toolGrammar, p.toolGrammarRoot);
  if (g == nullptr) {
    *error = "The tool-call grammar could not be parsed";
    return false;
  }
  r.sampler.SetToolGrammar(g, p.toolEndEog, &eogTokens_);
  // A prompt that opened a reasoning span lets the reasoning come first: the grammar of a
  // required call starts when the span closes (output.cc).
  bool reasoningFirst = p.reasoningOpen && !p.reasoningStart.empty() && !p.reasoningEnd.empty();
  if (p.toolRequired && !reasoningFirst && !r.sampler.StartToolGrammar({})) {
    *error = "The tool-call grammar could not start";
    return false;
  }
  return true;
}

void Scheduler::DrainCommands(bool wait) {
  std::deque<std::unique_ptr<RequestParams>> submitted;
  std::deque<std::unique_ptr<EmbedJob>> embeds;
  std::vector<uint64_t> cancels;
  std::vector<std::pair<uint64_t, bool>> pauses;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (wait) {
      auto ready = [&] { return closing_ || !submitted_.empty() || !embedSubmitted_.empty() || !cancels_.empty() || !pauses_.empty(); };
      // The CPU pools' workers poll for the next graph for a while before they sleep: a request
      // that follows at once finds them awake, but an idle spell must not keep them spinning on
      // cores that another context (or process) computes on. A short wait first, then they sleep.
      if (poolsAwake_ && !cv_.wait_for(lk, std::chrono::milliseconds(kPoolsPauseMs), ready)) {
        pools_.Pause();
        poolsAwake_ = false;
      }
      // Idle sessions must expire on time even when no request comes (wake once a second),
      // and write-through states wait for a quiet moment (wake after the grace period).
      bool dirty = false;
      for (auto &s : sequences_) dirty = dirty || s.diskDirty;
      if (ready()) {
        // a command came during the short wait
      } else if (dirty) {
        cv_.wait_for(lk, std::chrono::milliseconds(static_cast<int64_t>(kWriteThroughGraceMs) + 10), ready);
      } else if (sessions_.Size() > 0) {
        cv_.wait_for(lk, std::chrono::seconds(1), ready);
      } else {
        cv_.wait(lk, ready);
      }
    }
    submitted.swap(submitted_);
    embeds.swap(embedSubmitted_);
    cancels.swap(cancels_);
    pauses.swap(pauses_);
    if (!closing_) abortNow_.store(false);
  }
  for (auto &params : submitted) Intake(std::move(params));
  for (auto &job : embeds) embedder_->Add(std::move(job));
  for (uint64_t id : cancels) {
    CancelWaiting(id);
    embedder_->Cancel(id);
    for (auto &rp : active_) {
      if (rp->p->id == id && !rp->done) Fail(*rp, ErrorCode::Aborted, "The request was aborted");
    }
  }
  for (auto &pp : pauses) {
    for (auto &rp : active_) {
      if (rp->p->id == pp.first) rp->paused = pp.second;
    }
  }
}

void Scheduler::Intake(std::unique_ptr<RequestParams> params) {
  auto r = std::make_unique<Request>();
  r->p = std::move(params);
  r->time.submit = Clock::now();
  r->text.stream = std::make_unique<TextStream>(r->p->stops);
  if (r->p->command) {  // session commands: no prompt
    waiting_.push_back(std::move(r));
    return;
  }
  std::string error;
  bool failed = true;
  ErrorCode code = ErrorCode::InvalidArgument;
  r->tokens = std::move(r->p->promptTokens);
  if (encoderOnly_) {
    code = ErrorCode::Unsupported;
    error = "This model is an encoder for embeddings (its context has no KV cache): it cannot generate; use ctx.embed() or ctx.rerank()";
  } else if (r->tokens.empty() && !r->p->continueSession) {
    error = "The prompt is empty: it produced no tokens";
  } else if (r->tokens.size() >= sequenceContextSize_) {
    code = ErrorCode::ContextOverflow;
    error = "The prompt has " + std::to_string(r->tokens.size()) + " tokens but a sequence of this context holds " +
            std::to_string(sequenceContextSize_) + " (one more is needed to generate); use a larger contextSize or a shorter prompt";
  } else if (!r->sampler.Init(vocab_, r->p->sampling, cfg_.markers.Enabled() && r->p->detectToolCalls && r->p->greedyToolSyntax,
                              &error)) {
  } else if (!InitToolGrammar(*r, &error)) {
  } else {
    failed = false;
  }
  if (!failed && cfg_.markers.Enabled() && r->p->detectToolCalls) r->span.matcher = std::make_unique<MarkerMatcher>(&cfg_.markers);
  if (!failed && !r->p->reasoningStart.empty() && !r->p->reasoningEnd.empty()) {
    auto &rs = r->reasoning;
    rs.set.start = r->p->reasoningStart;
    rs.set.end = r->p->reasoningEnd;
    rs.matcher = std::make_unique<MarkerMatcher>(&rs.set);
    rs.stream = std::make_unique<TextStream>();
    if (r->p->reasoningOpen) {
      rs.matcher->StartInside();
      if (r->p->reasoningBudget == 0) rs.forced = rs.set.end;
    }
  }
  r->nPrompt = r->tokens.size();
  r->stats.promptTokens = static_cast<int32_t>(r->nPrompt);
  if (failed) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      waitingCount_--;
    }
    output_.Emit(Event::Failed(r->p->id, code, error, r->stats));
    return;
  }
  waiting_.push_back(std::move(r));
}

// A cancel for a request still waiting (never admitted, preempted, or waiting on a disk read).
void Scheduler::CancelWaiting(uint64_t id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->p->id != id) continue;
    {
      std::lock_guard<std::mutex> lk(mu_);
      waitingCount_--;
    }
    Request &r = **it;
    // preempted off its session's sequence: the session is free again (its KV is gone)
    if (r.preempt.resumed && r.session != nullptr) r.session->busy = false;
    if (!r.preempt.resumed) r.stats.queuedMs = MsBetween(r.time.submit, Clock::now());
    output_.Emit(Event::Failed(id, ErrorCode::Aborted, "The request was aborted", r.stats));
    waiting_.erase(it);
    return;
  }
}

}  // namespace llamux
