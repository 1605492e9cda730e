#include "engine/intake.h"

#include "engine/context_shift.h"
#include "engine/output.h"

namespace llamux {

Intake::Intake(const Settings &s) : s_(s) {
  const int32_t n = llama_vocab_n_tokens(s.vocab);
  for (llama_token t = 0; t < n; t++) {
    if (llama_vocab_is_eog(s.vocab, t)) eogTokens_.push_back(t);
  }
}

bool Intake::InitToolGrammar(Request &r, std::string *error) {
  const RequestParams &p = *r.p;
  if (p.toolGrammar.empty() || !s_.markers->Enabled() || !p.detectToolCalls) return true;
  llama_sampler *g = grammars_.Get(s_.vocab, p.toolGrammar, p.toolGrammarRoot);
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

std::unique_ptr<Request> Intake::Accept(std::unique_ptr<RequestParams> params, Output &output) {
  auto r = std::make_unique<Request>();
  r->p = std::move(params);
  r->time.submit = Clock::now();
  r->text.stream = std::make_unique<TextStream>(r->p->stops);
  if (r->p->command) return r;  // session commands: no prompt
  std::string error;
  bool failed = true;
  ErrorCode code = ErrorCode::InvalidArgument;
  r->tokens = std::move(r->p->promptTokens);
  r->bos = llama_vocab_bos(s_.vocab);
  if (!r->p->continueSession) {  // a continuation is cut once joined to its session (Sessions::Prepare)
    r->nPrompt = r->tokens.size();
    FitPrompt(*r, s_.sequenceContextSize);
  }
  if (s_.encoderOnly) {
    code = ErrorCode::Unsupported;
    error = "This model is an encoder for embeddings (its context has no KV cache): it cannot generate; use ctx.embed() or ctx.rerank()";
  } else if (r->tokens.empty() && !r->p->continueSession) {
    error = "The prompt is empty: it produced no tokens";
  } else if (r->tokens.size() >= s_.sequenceContextSize) {
    code = ErrorCode::ContextOverflow;
    error = "The prompt has " + std::to_string(r->tokens.size()) + " tokens but a sequence of this context holds " +
            std::to_string(s_.sequenceContextSize) + " (one more is needed to generate); use a larger contextSize or a shorter prompt";
  } else if (!r->sampler.Init(s_.vocab, r->p->sampling, s_.markers->Enabled() && r->p->detectToolCalls && r->p->greedyToolSyntax,
                              &error)) {
  } else if (!InitToolGrammar(*r, &error)) {
  } else {
    failed = false;
  }
  if (!failed && s_.markers->Enabled() && r->p->detectToolCalls) r->span.matcher = std::make_unique<MarkerMatcher>(s_.markers);
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
    output.Emit(Event::Failed(r->p->id, code, error, r->stats));
    return nullptr;
  }
  return r;
}

}  // namespace llamux
