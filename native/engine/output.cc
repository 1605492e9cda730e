#include "engine/output.h"

#include <algorithm>

namespace llamux {

std::string Output::Piece(llama_token tok, bool special) const {
  char buf[256];
  int32_t n = llama_token_to_piece(vocab_, tok, buf, sizeof(buf), 0, special);
  if (n >= 0) return std::string(buf, static_cast<size_t>(n));
  std::string piece(static_cast<size_t>(-n), '\0');
  n = llama_token_to_piece(vocab_, tok, piece.data(), static_cast<int32_t>(piece.size()), 0, special);
  piece.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return piece;
}

void Output::EmitPendingText(Request &r, bool evenIfEmpty) {
  if (r.text.pending.empty() && (!evenIfEmpty || r.text.pendingTokens.empty())) return;
  Event ev;
  ev.type = EventType::Text;
  ev.id = r.p->id;
  ev.text.swap(r.text.pending);
  ev.tokens.swap(r.text.pendingTokens);
  ev.logprobs.swap(r.logprobs);
  Emit(std::move(ev));
}

void Output::EmitSpanDelta(Request &r) {
  if (r.span.pending.empty()) return;
  r.span.text += r.span.pending;
  Event ev;
  ev.type = EventType::ToolCallDelta;
  ev.id = r.p->id;
  ev.index = r.span.index;
  ev.text.swap(r.span.pending);
  Emit(std::move(ev));
}

void Output::CloseSpan(Request &r, bool truncated) {
  r.span.stream->Flush(&r.span.pending);
  EmitSpanDelta(r);
  Event ev;
  ev.type = EventType::ToolCallEnd;
  ev.id = r.p->id;
  ev.index = r.span.index;
  ev.text = r.span.text;
  ev.tokens = r.span.tokens;
  ev.truncated = truncated;
  Emit(std::move(ev));
  r.span.open = false;
  r.span.index++;
}

// Routes what the marker matcher released.
Output::Step Output::ProcessOutputs(Request &r, const std::vector<MarkerMatcher::Output> &outs, FinishReason *reason) {
  for (const auto &o : outs) {
    switch (o.kind) {
      case MarkerMatcher::Kind::Text:
        for (llama_token t : o.tokens) {
          if (r.p->emitTokenIds) r.text.pendingTokens.push_back(t);
          if (r.text.stream->Push(Piece(t, r.p->renderSpecial), &r.text.pending)) {
            *reason = FinishReason::Stop;
            return Step::Finished;
          }
        }
        break;
      case MarkerMatcher::Kind::Open: {
        // Text before a span is final: stop strings apply to text outside spans only.
        r.text.stream->Flush(&r.text.pending);
        EmitPendingText(r, true);
        r.span.open = true;
        r.span.tokens.assign(o.tokens.begin(), o.tokens.end());
        r.span.text.clear();
        r.span.stream = std::make_unique<TextStream>();
        // The tool grammar covers the span from its start marker: feed it the marker unless it
        // is already active (toolChoice required: it produced the marker).
        if (r.sampler.HasToolGrammar() && !r.sampler.ToolGrammarActive() && !r.sampler.StartToolGrammar(o.tokens)) {
          return Step::GrammarFailed;
        }
        Event ev;
        ev.type = EventType::ToolCallStart;
        ev.id = r.p->id;
        ev.index = r.span.index;
        Emit(std::move(ev));
        break;
      }
      case MarkerMatcher::Kind::Body:
      case MarkerMatcher::Kind::PayloadOpen:
      case MarkerMatcher::Kind::PayloadClose:
        // Span bytes are exact: control tokens inside a span are rendered.
        for (llama_token t : o.tokens) {
          r.span.tokens.push_back(t);
          r.span.stream->Push(Piece(t, true), &r.span.pending);
        }
        break;
      case MarkerMatcher::Kind::Close:
        r.span.tokens.insert(r.span.tokens.end(), o.tokens.begin(), o.tokens.end());
        CloseSpan(r, false);
        r.sampler.StopToolGrammar();
        if (!r.p->parallelToolCalls) {
          *reason = FinishReason::ToolCall;
          return Step::Finished;
        }
        break;
    }
  }
  return Step::Continue;
}

void Output::EmitPendingReasoning(Request &r) {
  if (r.reasoning.pending.empty() && r.reasoning.pendingTokens.empty()) return;
  Event ev;
  ev.type = EventType::Reasoning;
  ev.id = r.p->id;
  ev.text.swap(r.reasoning.pending);
  ev.tokens.swap(r.reasoning.pendingTokens);
  Emit(std::move(ev));
}

// Routes what the reasoning matcher released: its text goes on to the tool-call matcher (or
// the text path), the span's body and markers become reasoning events.
Output::Step Output::ProcessReasoning(Request &r, const std::vector<MarkerMatcher::Output> &outs, FinishReason *reason) {
  auto &rs = r.reasoning;
  for (const auto &o : outs) {
    switch (o.kind) {
      case MarkerMatcher::Kind::Text:
        for (llama_token t : o.tokens) {
          Step step = OnOutputToken(r, t, reason);
          if (step != Step::Continue) return step;
        }
        break;
      case MarkerMatcher::Kind::Open:
        // Text before the span is final.
        r.text.stream->Flush(&r.text.pending);
        EmitPendingText(r, false);
        rs.pendingTokens.insert(rs.pendingTokens.end(), o.tokens.begin(), o.tokens.end());
        break;
      case MarkerMatcher::Kind::Close:
        rs.stream->Flush(&rs.pending);
        rs.pendingTokens.insert(rs.pendingTokens.end(), o.tokens.begin(), o.tokens.end());
        EmitPendingReasoning(r);
        rs.forced.clear();
        rs.forcedPos = 0;
        // A required call whose grammar waited for the reasoning starts now.
        if (r.p->toolRequired && r.sampler.HasToolGrammar() && !r.sampler.ToolGrammarActive() && r.span.index == 0 &&
            !r.sampler.StartToolGrammar({})) {
          return Step::GrammarFailed;
        }
        break;
      default:  // Body (a reasoning span has no payload markers)
        for (llama_token t : o.tokens) {
          rs.pendingTokens.push_back(t);
          rs.stream->Push(Piece(t, r.p->renderSpecial), &rs.pending);
        }
        break;
    }
  }
  return Step::Continue;
}

// Text-side channel headers (RequestParams::textDrop): a token that may begin one is held; a
// completed header is dropped (its tokens still travel with the text's token ids); a held run
// that can no longer complete one goes on, in order.
Output::Step Output::OnOutputToken(Request &r, llama_token tok, FinishReason *reason) {
  const auto &drops = r.p->textDrop;
  if (drops.empty() || r.span.open) return OnUndroppedToken(r, tok, reason);
  auto &held = r.dropHeld;
  held.push_back(tok);
  for (const auto &d : drops) {
    if (d.size() == held.size() && std::equal(d.begin(), d.end(), held.begin())) {
      if (r.p->emitTokenIds) r.text.pendingTokens.insert(r.text.pendingTokens.end(), held.begin(), held.end());
      held.clear();
      return Step::Continue;
    }
  }
  for (const auto &d : drops) {
    if (d.size() > held.size() && std::equal(held.begin(), held.end(), d.begin())) return Step::Continue;
  }
  // No header can complete: release the first token and try again with the rest.
  std::vector<llama_token> rest(held.begin() + 1, held.end());
  llama_token first = held.front();
  held.clear();
  Step step = OnUndroppedToken(r, first, reason);
  for (llama_token t : rest) {
    if (step != Step::Continue) return step;
    step = OnOutputToken(r, t, reason);
  }
  return step;
}

Output::Step Output::FlushDropped(Request &r, FinishReason *reason) {
  std::vector<llama_token> held;
  held.swap(r.dropHeld);
  Step step = Step::Continue;
  for (llama_token t : held) {
    if (step != Step::Continue) break;
    step = OnUndroppedToken(r, t, reason);
  }
  return step;
}

Output::Step Output::OnUndroppedToken(Request &r, llama_token tok, FinishReason *reason) {
  if (r.span.matcher) {
    outs_.clear();
    r.span.matcher->Push(tok, &outs_);
    Step step = ProcessOutputs(r, outs_, reason);
    if (r.p->greedyToolSyntax) r.sampler.UseGreedy(r.span.matcher->WantsGreedy());
    return step;
  }
  if (r.p->emitTokenIds) r.text.pendingTokens.push_back(tok);
  if (r.text.stream->Push(Piece(tok, r.p->renderSpecial), &r.text.pending)) {
    *reason = FinishReason::Stop;
    return Step::Finished;
  }
  return Step::Continue;
}

Output::Step Output::OnToken(Request &r, llama_token tok, size_t nCtxSeq, FinishReason *reason) {
  Clock::time_point now = Clock::now();
  if (r.nGenerated == 0) {
    r.time.firstToken = now;
    r.stats.ttftMs = MsBetween(r.time.submit, now);
  }
  r.time.last = now;
  if (llama_vocab_is_eog(vocab_, tok)) {
    // An end marker may itself end generation (e.g. <|eom_id|>): let it close the span.
    if (r.span.matcher && r.span.open && std::find(markers_->end.begin(), markers_->end.end(), tok) != markers_->end.end()) {
      outs_.clear();
      r.span.matcher->Push(tok, &outs_);
      FinishReason ignored;
      ProcessOutputs(r, outs_, &ignored);
    }
    *reason = FinishReason::Eog;
    return Step::Finished;
  }
  r.tokens.push_back(tok);
  r.nGenerated++;
  Step step = Step::Continue;
  auto &rs = r.reasoning;
  if (rs.matcher && !r.span.open) {
    bool inside = rs.matcher->region() != MarkerMatcher::Region::Text;
    if (inside) rs.count++;
    reasonOuts_.clear();
    rs.matcher->Push(tok, &reasonOuts_);
    step = ProcessReasoning(r, reasonOuts_, reason);
    // The budget is spent: the end marker follows (what of it is already held is not repeated).
    if (step == Step::Continue && r.p->reasoningBudget >= 0 && rs.forced.empty() &&
        rs.matcher->region() != MarkerMatcher::Region::Text && rs.count >= r.p->reasoningBudget) {
      size_t held = std::min(rs.matcher->HeldSize(), rs.set.end.size());
      rs.forced.assign(rs.set.end.begin() + static_cast<long>(held), rs.set.end.end());
      rs.forcedPos = 0;
    }
  } else {
    step = OnOutputToken(r, tok, reason);
  }
  if (step != Step::Continue) return step;
  // a full sequence ends the generation unless it shifts (Batch::Build, context_shift.h)
  if ((r.p->maxTokens >= 0 && r.nGenerated >= r.p->maxTokens) || (r.p->overflow == Overflow::Stop && r.tokens.size() >= nCtxSeq)) {
    *reason = FinishReason::Length;
    return Step::Finished;
  }
  return Step::Continue;
}

void Output::Finish(Request &r, FinishReason reason) { End(r, reason, nullptr, ""); }

void Output::Fail(Request &r, ErrorCode code, const std::string &message) {
  End(r, code == ErrorCode::Aborted ? FinishReason::Abort : FinishReason::Error, ErrorCodeName(code), message);
}

void Output::End(Request &r, FinishReason reason, const char *code, const std::string &message) {
  if (r.Done()) return;
  // Held-back text (a possible stop string, a possible marker, an incomplete character) is
  // released only when generation really ended there (eog, length). An abort or error cuts
  // the output short: what was held stays unsaid, so everything streamed is a prefix of what
  // the full run would have streamed.
  if (reason == FinishReason::Eog || reason == FinishReason::Length) {
    if (r.reasoning.matcher && !r.span.open) {
      // Held tokens: inside a span they are reasoning, outside they go on as text.
      reasonOuts_.clear();
      r.reasoning.matcher->Flush(&reasonOuts_);
      FinishReason ignored;
      ProcessReasoning(r, reasonOuts_, &ignored);
    }
    if (r.reasoning.stream) r.reasoning.stream->Flush(&r.reasoning.pending);
    if (!r.dropHeld.empty()) {
      FinishReason ignored;
      FlushDropped(r, &ignored);
    }
    if (r.span.matcher) {
      outs_.clear();
      r.span.matcher->Flush(&outs_);
      FinishReason ignored;
      ProcessOutputs(r, outs_, &ignored);
    }
    r.text.stream->Flush(&r.text.pending);
  }
  EmitPendingReasoning(r);
  EmitPendingText(r, true);
  if (r.span.open) CloseSpan(r, true);  // never reported as a complete call
  FinalStats &st = r.stats;
  st.generatedTokens = r.nGenerated;
  if (st.prefilledTokens == 0 && r.nPast > static_cast<size_t>(st.reusedTokens)) {
    st.prefilledTokens = static_cast<int32_t>(std::min(r.nPast, r.nPrompt)) - st.reusedTokens;
  }
  if (st.prefillMs > 0) st.prefillTokensPerSec = st.prefilledTokens / (st.prefillMs / 1000.0);
  if (r.nGenerated > 1) {
    st.decodeMs = MsBetween(r.time.firstToken, r.time.last);
    if (st.decodeMs > 0) st.decodeTokensPerSec = (r.nGenerated - 1) / (st.decodeMs / 1000.0);
  }
  Event ev = Event::Final(r.p->id, reason, st);
  if (code != nullptr) {
    ev.code = code;
    ev.message = message;
  }
  if (reason == FinishReason::Stop) ev.stop = r.text.stream->MatchedStop();
  ev.logprobs.swap(r.logprobs);  // tokens whose text was held back (a stop string) or in spans
  Emit(std::move(ev));
}

void Output::Progress(const Request &r, Clock::time_point now) {
  Event ev;
  ev.type = EventType::Progress;
  ev.id = r.p->id;
  ev.stats.promptTokens = static_cast<int32_t>(r.nPrompt);
  ev.stats.reusedTokens = r.stats.reusedTokens;
  ev.stats.prefilledTokens = static_cast<int32_t>(std::min(r.nPast, r.nPrompt)) - r.stats.reusedTokens;
  ev.stats.prefillMs = r.time.prefillStarted ? std::chrono::duration<double, std::milli>(now - r.time.prefillStart).count() : 0;
  ev.stats.retainedTokens = r.stats.retainedTokens;
  ev.stats.retainRefused = r.stats.retainRefused;
  Emit(std::move(ev));
}

void Output::FlushEvents(const std::vector<std::unique_ptr<Request>> &active, bool force) {
  // Output goes to JS at most every kFlushIntervalUs: fast models sample a token every few
  // hundred microseconds, and each hand-over wakes the JS thread, which costs the decode a few
  // percent at one wake per token on a 2-vCPU machine (measured: 0.93x of the raw loop at 1 ms,
  // 1.00x at 8 ms). A slower model still streams every token (its steps are longer than the
  // interval). A request's first output, ends, errors and tool-call events go at once.
  constexpr double kFlushIntervalUs = 8000.0;
  Clock::time_point now = Clock::now();
  bool urgent = force || !events_.empty();
  for (size_t i = 0; !urgent && i < active.size(); i++) {
    const Request &r = *active[i];
    urgent = !r.Done() && !r.streamed && (!r.text.pending.empty() || !r.reasoning.pending.empty() || !r.span.pending.empty());
  }
  if (!urgent && std::chrono::duration<double, std::micro>(now - lastFlush_).count() < kFlushIntervalUs) return;
  lastFlush_ = now;
  for (auto &rp : active) {
    Request &r = *rp;
    if (r.Done()) continue;
    // Tokens travel with the text they produced: a token that only began a UTF-8
    // character (or a possible stop string) waits for the event that completes it.
    size_t before = events_.size();
    EmitPendingReasoning(r);
    EmitPendingText(r, false);
    EmitSpanDelta(r);
    if (events_.size() > before) r.streamed = true;
  }
  if (!events_.empty()) {
    std::vector<Event> out;
    out.swap(events_);
    flush_(std::move(out));
  }
}

}  // namespace llamux
