#include "sampler.h"

#include "grammar_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>

namespace llamux {

Sampler::~Sampler() {
  if (normal_ != nullptr) llama_sampler_free(normal_);
  if (greedy_ != nullptr) llama_sampler_free(greedy_);
  if (tool_ != nullptr) llama_sampler_free(tool_);
}

void Sampler::SetToolGrammar(llama_sampler *grammar, llama_token endEog, const std::vector<llama_token> *eogTokens) {
  if (tool_ != nullptr) llama_sampler_free(tool_);
  tool_ = grammar;
  toolActive_ = false;
  toolEndEog_ = endEog;
  eogTokens_ = eogTokens;
}

bool Sampler::StartToolGrammar(const std::vector<llama_token> &prefix) {
  if (tool_ == nullptr) return false;
  try {
    llama_sampler_reset(tool_);
    // Only tokens the grammar allows are fed: llama.cpp aborts on an EOG token it cannot end at.
    for (llama_token t : prefix) {
      if (!ToolAllows(t, 0.0f)) return false;
      llama_sampler_accept(tool_, t);
    }
  } catch (const std::exception &e) {
    if (std::strstr(e.what(), kGrammarStackLimitError) != nullptr) overStackLimit_ = true;
    return false;
  }
  toolActive_ = true;
  return true;
}

// Whether the active tool grammar allows `t` next (a one-candidate apply: cheap).
bool Sampler::ToolAllows(llama_token t, float logit) {
  if (toolEndEog_ >= 0 && t != toolEndEog_ && eogTokens_ != nullptr &&
      std::find(eogTokens_->begin(), eogTokens_->end(), t) != eogTokens_->end()) {
    return false;
  }
  llama_token_data one = {t, logit, 0.0f};
  llama_token_data_array arr = {&one, 1, -1, false};
  llama_sampler_apply(tool_, &arr);
  return !(std::isinf(one.logit) && one.logit < 0);
}

// Greedy over the grammar's choices without masking the whole vocabulary: `arr` holds the
// chain's final logits (bias and penalties applied, in id order), so the best allowed token is
// the best of the top candidates, by logit then id, that the grammar takes. The grammar checks
// the top 64 in one call; -1 when none of them is allowed (the caller masks everything then).
llama_token Sampler::GreedyAllowed(const llama_token_data_array &arr) {
  order_.clear();
  for (size_t i = 0; i < arr.size; i++) {
    if (!std::isinf(arr.data[i].logit)) order_.push_back(i);
  }
  auto better = [&](size_t a, size_t b) {
    const llama_token_data &x = arr.data[a], &y = arr.data[b];
    return x.logit > y.logit || (x.logit == y.logit && x.id < y.id);
  };
  const size_t k = std::min<size_t>(64, order_.size());
  if (k == 0) return -1;
  std::partial_sort(order_.begin(), order_.begin() + static_cast<long>(k), order_.end(), better);
  top_.clear();
  for (size_t i = 0; i < k; i++) {
    llama_token_data c = arr.data[order_[i]];
    if (toolEndEog_ >= 0 && c.id != toolEndEog_ && eogTokens_ != nullptr &&
        std::find(eogTokens_->begin(), eogTokens_->end(), c.id) != eogTokens_->end()) {
      c.logit = -INFINITY;
    }
    top_.push_back(c);
  }
  llama_token_data_array small = {top_.data(), top_.size(), -1, false};
  llama_sampler_apply(tool_, &small);
  for (const llama_token_data &c : top_) {
    if (!std::isinf(c.logit)) return c.id;  // top_ keeps the best-first order
  }
  return -1;
}

void Sampler::FillCandidates(const float *logits) {
  cur_.resize(static_cast<size_t>(nVocab_));
  for (int32_t t = 0; t < nVocab_; t++) cur_[static_cast<size_t>(t)] = llama_token_data{t, logits[t], 0.0f};
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
    if (!greedy) grammar_ = g;
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
  normalIsGreedy_ = p.temperature <= 0.0f;
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
  FillCandidates(logits);
  llama_token_data_array arr = {cur_.data(), cur_.size(), -1, false};
  llama_sampler *active = useGreedy_ ? greedy_ : normal_;
  try {
    llama_sampler_apply(active, &arr);
    if (arr.selected < 0 || static_cast<size_t>(arr.selected) >= arr.size) return -1;
    if (toolActive_ && !ToolAllows(arr.data[arr.selected].id, arr.data[arr.selected].logit)) {
      // The chain's pick breaks the tool grammar. A greedy chain needs only the best allowed
      // token: try the candidates best first. Otherwise mask every candidate the grammar
      // refuses and pick again. Checking the pick first keeps the full mask (the costly part)
      // to the tokens where the model strays.
      if ((active == greedy_ || normalIsGreedy_) && !arr.sorted) {
        llama_token best = GreedyAllowed(arr);
        if (best >= 0) return Accept(best) ? best : -2;
      }
      FillCandidates(logits);
      if (toolEndEog_ >= 0 && eogTokens_ != nullptr) {
        for (llama_token e : *eogTokens_) {
          if (e != toolEndEog_ && e >= 0 && e < nVocab_) cur_[static_cast<size_t>(e)].logit = -INFINITY;
        }
      }
      arr = {cur_.data(), cur_.size(), -1, false};
      llama_sampler_apply(tool_, &arr);
      bool any = false;
      for (size_t i = 0; i < arr.size && !any; i++) any = !std::isinf(arr.data[i].logit);
      if (!any) return -2;
      llama_sampler_apply(active, &arr);
      if (arr.selected < 0 || static_cast<size_t>(arr.selected) >= arr.size) return -1;
    }
  } catch (const std::exception &) {
    return -2;
  }
  // Every candidate was masked (e.g. a grammar that allows no token here).
  if (std::isinf(arr.data[arr.selected].logit) && arr.data[arr.selected].logit < 0) return -2;
  llama_token tok = arr.data[arr.selected].id;
  if (!Accept(tok)) return -2;
  return tok;
}

size_t Sampler::GrammarPrefix(const llama_token *draft, size_t n) {
  if (n == 0 || (grammar_ == nullptr && !toolActive_)) return n;
  llama_sampler *g = grammar_ != nullptr ? llama_sampler_clone(grammar_) : nullptr;
  llama_sampler *t = toolActive_ ? llama_sampler_clone(tool_) : nullptr;
  size_t ok = 0;
  try {
    for (; ok < n; ok++) {
      const llama_token tok = draft[ok];
      // EOG tokens end the draft: llama.cpp's grammar aborts on one it cannot end at
      if (eogTokens_ != nullptr && std::find(eogTokens_->begin(), eogTokens_->end(), tok) != eogTokens_->end()) break;
      bool allowed = true;
      for (llama_sampler *s : {g, t}) {
        if (s == nullptr || !allowed) continue;
        llama_token_data one = {tok, 0.0f, 0.0f};
        llama_token_data_array arr = {&one, 1, -1, false};
        llama_sampler_apply(s, &arr);
        allowed = !(std::isinf(one.logit) && one.logit < 0);
      }
      if (!allowed) break;
      if (g != nullptr) llama_sampler_accept(g, tok);
      if (t != nullptr) llama_sampler_accept(t, tok);
    }
  } catch (const std::exception &) {
    // a grammar that throws on the copy: verify no further (the real state decides)
  }
  if (g != nullptr) llama_sampler_free(g);
  if (t != nullptr) llama_sampler_free(t);
  return ok;
}

bool Sampler::Accept(llama_token t) {
  // llama.cpp's grammar sampler throws when a token leaves it without a state, or (the
  // grammar-stack-cap patch) when its parses pass kMaxGrammarStacks: that must fail the request
  // (GRAMMAR_FAILED), never escape the engine thread.
  try {
    if (normal_ != nullptr) llama_sampler_accept(normal_, t);
    if (greedy_ != nullptr) llama_sampler_accept(greedy_, t);
    if (toolActive_) llama_sampler_accept(tool_, t);
    return true;
  } catch (const std::exception &e) {
    if (std::strstr(e.what(), kGrammarStackLimitError) != nullptr) overStackLimit_ = true;
    return false;
  }
}

}  // namespace llamux
