#include "engine/token_step.h"

#include "engine/lifecycle.h"
#include "engine/output.h"
#include "sampling/logprobs.h"
#include "testing/logits_tap.h"

namespace llamux {

TokenStep TokenStepper::Next(Request &r, int32_t idx) {
  TokenStep st;
  if (logits_tap::On()) {
    logits_tap::Record(r.p->sampling.seed, r.nGenerated, llama_get_logits_ith(ctx_, idx), nVocab_);
  }
  Clock::time_point t0 = Clock::now();
  llama_token tok;
  if (r.reasoning.forcedPos < r.reasoning.forced.size()) {
    // A reasoning budget ran out: its end marker is forced, token by token.
    tok = r.reasoning.forced[r.reasoning.forcedPos++];
    if (r.reasoning.forcedPos == r.reasoning.forced.size()) {
      r.reasoning.forced.clear();
      r.reasoning.forcedPos = 0;
    }
    if (!r.sampler.Accept(tok)) tok = -2;
  } else {
    tok = r.sampler.Sample(ctx_, idx);
  }
  r.stats.sampleMs += MsBetween(t0, Clock::now());
  st.tok = tok;
  if (tok == -2) {
    st.kind = TokenStep::Kind::Fail;
    st.code = ErrorCode::GrammarFailed;
    st.message = r.sampler.OverStackLimit() ? "The grammar is too ambiguous: more than 1024 parses of the output at once (alternatives that match the same text, nested); make its alternatives start differently" : "The grammar allows no token at this point of the output";
    return st;
  }
  if (tok < 0) {
    st.kind = TokenStep::Kind::Fail;
    st.code = ErrorCode::DecodeFailed;
    st.message = "llama.cpp returned no logits for this sequence";
    return st;
  }
  if (r.p->logprobs >= 0) {
    // One entry per generated token (an end-of-generation token is not output), drafted rows
    // included: each row's logits are the ones its token was sampled from.
    const float *logits = llama_get_logits_ith(ctx_, idx);
    if (logits != nullptr && !llama_vocab_is_eog(vocab_, tok)) {
      r.logprobs.push_back(ComputeLogprob(logits, nVocab_, tok, r.p->logprobs, &r.logprobScratch));
    }
  }
  Output::Step step = output_->OnToken(r, tok, nCtxSeq_, &st.reason);
  life_->FirstToken(r);
  if (step == Output::Step::GrammarFailed) {
    st.kind = TokenStep::Kind::Fail;
    st.code = ErrorCode::GrammarFailed;
    st.message = "The tool-call grammar refused the start marker";
  } else if (step == Output::Step::Finished) {
    st.kind = TokenStep::Kind::Finish;
  }
  return st;
}

void TokenStepper::End(Request &r, const TokenStep &st) {
  if (st.kind == TokenStep::Kind::Fail) life_->Fail(r, st.code, st.message);
  else if (st.kind == TokenStep::Kind::Finish) life_->Finish(r, st.reason);
}

}  // namespace llamux
