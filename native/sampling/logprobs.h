// Log-probabilities of sampled tokens (the `logprobs` request option): the log-softmax of the
// model's raw logits for the position (before logit bias, penalties, grammars and temperature,
// like OpenAI's), the sampled token's and the k most likely ones. Plain C++, engine thread.
#pragma once
#include <llama.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace llamux {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // best first (logprob, then id); k entries
};

// `scratch` is reused between calls (one per request).
TokenLogprob ComputeLogprob(const float *logits, int32_t nVocab, llama_token chosen, int32_t topK,
                            std::vector<int32_t> *scratch);

}  // namespace llamux
