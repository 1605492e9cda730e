#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>

namespace llamux {

TokenLogprob ComputeLogprob(const float *logits, int32_t nVocab, llama_token chosen, int32_t topK,
                            std::vector<int32_t> *scratch) {
  TokenLogprob out;
  out.token = chosen;
  // log p(t) = l(t) - max - log(sum exp(l - max)): stable for any logit range.
  float max = -INFINITY;
  for (int32_t t = 0; t < nVocab; t++) max = std::max(max, logits[t]);
  double sum = 0.0;
  for (int32_t t = 0; t < nVocab; t++) sum += std::exp(static_cast<double>(logits[t] - max));
  const float logZ = max + static_cast<float>(std::log(sum));
  auto lp = [&](int32_t t) { return logits[t] - logZ; };
  out.logprob = chosen >= 0 && chosen < nVocab ? lp(chosen) : -INFINITY;
  const int32_t k = std::min(topK, nVocab);
  if (k <= 0) return out;
  scratch->resize(static_cast<size_t>(nVocab));
  for (int32_t t = 0; t < nVocab; t++) (*scratch)[static_cast<size_t>(t)] = t;
  std::partial_sort(scratch->begin(), scratch->begin() + k, scratch->end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out.top.reserve(static_cast<size_t>(k));
  for (int32_t i = 0; i < k; i++) {
    int32_t t = (*scratch)[static_cast<size_t>(i)];
    out.top.emplace_back(t, lp(t));
  }
  return out;
}

}  // namespace llamux
