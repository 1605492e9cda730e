// TokenStepper: one sampled token through the output path (sampler, logprobs, markers, text),
// shared by plain decode steps and the rows of a speculative draft (Speculation::Verify),
// and ending the request when that token ended it. Plain C++, engine thread only.
#pragma once
#include <llama.h>

#include <cstdint>
#include <string>

#include "engine/errors.h"
#include "engine/finish_reason.h"
#include "engine/request_state.h"

namespace llamux {

class Lifecycle;
class Output;

struct TokenStep {
  enum class Kind : uint8_t { Continue, Finish, Fail } kind = Kind::Continue;
  llama_token tok = -1;
  FinishReason reason = FinishReason::Eog;
  ErrorCode code = ErrorCode::Internal;
  std::string message;
};

class TokenStepper {
 public:
  TokenStepper(llama_context *ctx, const llama_vocab *vocab, Output *output, Lifecycle *life, uint32_t sequenceContextSize)
      : ctx_(ctx), vocab_(vocab), nVocab_(llama_vocab_n_tokens(vocab)), output_(output), life_(life),
        nCtxSeq_(sequenceContextSize) {}

  // One token from output row `idx`: sampled (or forced: a spent reasoning budget), then fed
  // to the output path. The step says whether generation goes on; End ends the request.
  TokenStep Next(Request &r, int32_t idx);
  void End(Request &r, const TokenStep &st);
  // Next, then End when the token ended it.
  void Step(Request &r, int32_t idx) {
    TokenStep st = Next(r, idx);
    if (st.kind != TokenStep::Kind::Continue) End(r, st);
  }

 private:
  llama_context *ctx_;
  const llama_vocab *vocab_;
  int32_t nVocab_;
  Output *output_;
  Lifecycle *life_;
  uint32_t nCtxSeq_;
};

}  // namespace llamux
