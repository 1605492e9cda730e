// Intake: a request from JS (token ids: JS tokenizes, src/engine/prompt-tokens.ts) checked and
// made ready before it waits for admission: prompt size, sampler chain, tool-call grammar,
// marker and reasoning matchers. A request that fails here ends at once with its error.
// Plain C++, engine thread only.
#pragma once
#include <llama.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/request_state.h"
#include "sampling/grammar_cache.h"
#include "sampling/marker_matcher.h"

namespace llamux {

class Output;

class Intake {
 public:
  struct Settings {
    const llama_vocab *vocab = nullptr;
    const MarkerSet *markers = nullptr;  // the context's tool-call markers
    uint32_t sequenceContextSize = 0;
    bool encoderOnly = false;  // no KV memory (BERT-style): embeddings only
  };
  explicit Intake(const Settings &s);

  // The request, ready to wait; nullptr when it failed (its failure event is in `output`).
  std::unique_ptr<Request> Accept(std::unique_ptr<RequestParams> params, Output &output);

 private:
  bool InitToolGrammar(Request &r, std::string *error);

  Settings s_;
  GrammarCache grammars_;               // parsed tool-call grammars
  std::vector<llama_token> eogTokens_;  // the vocabulary's end-of-generation tokens
};

}  // namespace llamux
