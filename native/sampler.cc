#include "sampler.h"

#include <cmath>
#include <exception>

namespace llamux {

Sampler::~Sampler() {
  if (normal_ != nullptr) llama_sampler_free(normal_);
  if (greedy_ != nullptr) llama_sampler_free(greedy_);
}

llama_sampler *Sampler::BuildChain(const llama_vocab *vocab, const SamplerParams &p, bool greedy,
                                   std::string *error) {
  llama_sampler_chain_params cp = llama_sampler_chain_default_params();
  cp.no_perf = true;
  llama_sampler *chain = llama_sampler_chain_init(cp);
  if (!p.logitBias.empty()) {
    std::vector<llama_logit_bias> bias;
    bias.reserve(p.logitBias.size());
    for (auto &b : p.logitBias) bias.push_back({b.first, b.second});
    llama_sampler_chain_add(chain, llama_sampler_init_logit_bias(nVocab_, static_cast<int32_t>(bias.size()), bias.data()));
  }
  if (p.repeatPenalty != 1.0f || p.frequencyPenalty != 0.0f || p.presencePenalty != 0.0f) {
    llama_sampler_chain_add(chain, llama_sampler_init_penalties(nVocab_, p.penaltyLastN, p.repeatPenalty, p.frequencyPenalty,
                                                                p.presencePenalty));
  }
  if (!p.grammar.empty()) {
    llama_sampler *g = llama_sampler_init_grammar(vocab, p.grammar.c_str(), p.grammarRoot.c_str());
    if (g == nullptr) {
      if (error != nullptr) *error = "The GBNF grammar could not be parsed";
      llama_sampler_free(chain);
      return nullptr;
    }
    llama_sampler_chain_add(chain, g);
  }
  if (greedy || p.temperature <= 0.0f) {
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    return chain;
  }
  if (p.topK > 0) llama_sampler_chain_add(chain, llama_sampler_init_top_k(p.topK));
  if (p.typicalP < 1.0f) llama_sampler_chain_add(chain, llama_sampler_init_typical(p.typicalP, 1));
  if (p.topP < 1.0f) llama_sampler_chain_add(chain, llama_sampler_init_top_p(p.topP, 1));
  if (p.minP > 0.0f) llama_sampler_chain_add(chain, llama_sampler_init_min_p(p.minP, 1));
  llama_sampler_chain_add(chain, llama_sampler_init_temp(p.temperature));
  llama_sampler_chain_add(chain, llama_sampler_init_dist(p.seed));
  return chain;
}

bool Sampler::Init(const llama_vocab *vocab, const SamplerParams &p, bool withGreedy, std::string *error) {
  nVocab_ = llama_vocab_n_tokens(vocab);
  normal_ = BuildChain(vocab, p, false, error);
  if (normal_ == nullptr) return false;
  if (withGreedy) {
    greedy_ = BuildChain(vocab, p, true, error);
    if (greedy_ == nullptr) return false;
  }
  cur_.reserve(static_cast<size_t>(nVocab_));
  return true;
}

llama_token Sampler::Sample(llama_context *ctx, int32_t idx) {
  const float *logits = llama_get_logits_ith(ctx, idx);
  if (logits == nullptr) return -1;
  cur_.resize(static_cast<size_t>(nVocab_));
  for (int32_t t = 0; t < nVocab_; t++) cur_[static_cast<size_t>(t)] = llama_token_data{t, logits[t], 0.0f};
  llama_token_data_array arr = {cur_.data(), cur_.size(), -1, false};
  llama_sampler *active = useGreedy_ ? greedy_ : normal_;
  try {
    llama_sampler_apply(active, &arr);
  } catch (const std::exception &) {
    return -2;
  }
  if (arr.selected < 0 || static_cast<size_t>(arr.selected) >= arr.size) return -1;
  // Every candidate was masked (e.g. a grammar that allows no token here).
  if (std::isinf(arr.data[arr.selected].logit) && arr.data[arr.selected].logit < 0) return -2;
  llama_token tok = arr.data[arr.selected].id;
  if (!Accept(tok)) return -2;
  return tok;
}

bool Sampler::Accept(llama_token t) {
  // llama.cpp's grammar sampler throws when a token leaves it without a state: that must
  // fail the request, never escape the engine thread.
  try {
    if (normal_ != nullptr) llama_sampler_accept(normal_, t);
    if (greedy_ != nullptr) llama_sampler_accept(greedy_, t);
    return true;
  } catch (const std::exception &) {
    return false;
  }
}

}  // namespace llamux
