#include "sampling/sampler.h"

#include "sampling/grammar_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>

namespace llamux {

Sampler::~Sampler() {
  if (pre_ != nullptr) llama_sampler_free(pre_);
  if (grammar_ != nullptr) llama_sampler_free(grammar_);
  if (normal_ != nullptr) llama_sampler_free(normal_);
  if (greedy_ != nullptr) llama_sampler_free(greedy_);
  if (tool_ != nullptr) llama_sampler_free(tool_);
  if (toolStart_ != nullptr) llama_sampler_free(toolStart_);
}

void Sampler::SetToolGrammar(llama_sampler *grammar, llama_token endEog, const std::vector<llama_token> *eogTokens) {
  if (tool_ != nullptr) llama_sampler_free(tool_);
  if (toolStart_ != nullptr) llama_sampler_free(toolStart_);
  toolStart_ = grammar;
  tool_ = grammar != nullptr ? llama_sampler_clone(grammar) : nullptr;
  toolActive_ = false;
  toolEndEog_ = endEog;
  eogTokens_ = eogTokens;
}

bool Sampler::StartToolGrammar(const std::vector<llama_token> &prefix) {
  if (tool_ == nullptr) return false;
  try {
    llama_sampler *fresh = llama_sampler_clone(toolStart_);
    llama_sampler_free(tool_);
    tool_ = fresh;
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

void Sampler::MaskRefused(llama_token_data_array *arr) {
  if (grammar_ != nullptr) llama_sampler_apply(grammar_, arr);
  if (!toolActive_) return;
  if (toolEndEog_ >= 0 && eogTokens_ != nullptr) {
    if (arr->data == cur_.data() && arr->size == cur_.size()) {
      // the whole vocabulary in id order: index the few EOG tokens instead of searching per candidate
      for (llama_token e : *eogTokens_) {
        if (e != toolEndEog_ && e >= 0 && static_cast<size_t>(e) < arr->size) arr->data[e].logit = -INFINITY;
      }
    } else {
      for (size_t i = 0; i < arr->size; i++) {
        const llama_token id = arr->data[i].id;
        if (id != toolEndEog_ && std::find(eogTokens_->begin(), eogTokens_->end(), id) != eogTokens_->end()) arr->data[i].logit = -INFINITY;
      }
    }
  }
  llama_sampler_apply(tool_, arr);
}

bool Sampler::Allowed(const llama_token_data &c) {
  llama_token_data one = c;
  llama_token_data_array arr = {&one, 1, -1, false};
  MaskRefused(&arr);
  return !(std::isinf(one.logit) && one.logit < 0);
}

bool Sampler::TopAllowed(const llama_token_data_array &arr, size_t want, size_t scan) {
  order_.clear();
  for (size_t i = 0; i < arr.size; i++) {
    if (!std::isinf(arr.data[i].logit)) order_.push_back(i);
  }
  auto better = [&](size_t a, size_t b) {
    const llama_token_data &x = arr.data[a], &y = arr.data[b];
    return x.logit > y.logit || (x.logit == y.logit && x.id < y.id);
  };
  const size_t k = std::min(scan, order_.size());
  std::partial_sort(order_.begin(), order_.begin() + static_cast<long>(k), order_.end(), better);
  top_.clear();
  // The grammars check 64 candidates per call: one call usually decides.
  std::vector<llama_token_data> chunk;
  for (size_t at = 0; at < k && top_.size() < want; at += 64) {
    chunk.clear();
    for (size_t i = at; i < std::min(k, at + 64); i++) chunk.push_back(arr.data[order_[i]]);
    llama_token_data_array small = {chunk.data(), chunk.size(), -1, false};
    MaskRefused(&small);
    for (const llama_token_data &c : chunk) {
      if (std::isinf(c.logit)) continue;
      top_.push_back(c);
      if (top_.size() == want) break;
    }
  }
  return top_.size() == want || k == order_.size();
}

void Sampler::FillCandidates(const float *logits) {
  cur_.resize(static_cast<size_t>(nVocab_));
  for (int32_t t = 0; t < nVocab_; t++) cur_[static_cast<size_t>(t)] = llama_token_data{t, logits[t], 0.0f};
}

llama_sampler *Sampler::BuildTail(const SamplerParams &p, bool greedy) {
  llama_sampler_chain_params cp = llama_sampler_chain_default_params();
  cp.no_perf = true;
  llama_sampler *chain = llama_sampler_chain_init(cp);
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
  const bool penalties = p.repeatPenalty != 1.0f || p.frequencyPenalty != 0.0f || p.presencePenalty != 0.0f;
  plainPre_ = !penalties;
  bias_ = p.logitBias;
  std::sort(bias_.begin(), bias_.end());
  for (size_t i = 0; i < bias_.size(); i++) {
    if (bias_[i].first < 0 || bias_[i].first >= nVocab_ || (i > 0 && bias_[i].first == bias_[i - 1].first)) biasUsable_ = false;
  }
  if (!p.logitBias.empty() || penalties) {
    llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    cp.no_perf = true;
    pre_ = llama_sampler_chain_init(cp);
    if (!p.logitBias.empty()) {
      std::vector<llama_logit_bias> bias;
      bias.reserve(p.logitBias.size());
      for (auto &b : p.logitBias) bias.push_back({b.first, b.second});
      llama_sampler_chain_add(pre_, llama_sampler_init_logit_bias(nVocab_, static_cast<int32_t>(bias.size()), bias.data()));
    }
    if (penalties) {
      llama_sampler_chain_add(pre_, llama_sampler_init_penalties(nVocab_, p.penaltyLastN, p.repeatPenalty, p.frequencyPenalty, p.presencePenalty));
    }
  }
  if (!p.grammar.empty()) {
    grammar_ = llama_sampler_init_grammar(vocab, p.grammar.c_str(), p.grammarRoot.c_str());
    if (grammar_ == nullptr) {
      if (error != nullptr) *error = "The GBNF grammar could not be parsed";
      return false;
    }
  }
  normal_ = BuildTail(p, false);
  normalIsGreedy_ = p.temperature <= 0.0f;
  topK_ = p.topK;
  if (withGreedy) greedy_ = BuildTail(p, true);
  cur_.reserve(static_cast<size_t>(nVocab_));
  return true;
}

llama_token Sampler::ArgmaxBiased(const float *logits) const {
  // In index order with a strict comparison from token 0, as llama_sampler_greedy does over
  // candidates filled in index order; a biased token's logit is logit + bias, as
  // llama_sampler_logit_bias makes it. The biased tokens split the scan into plain runs.
  int32_t best = 0;
  float bestLogit = logits[0];
  size_t b = 0;
  if (!bias_.empty() && bias_[0].first == 0) bestLogit = logits[0] + bias_[b++].second;
  int32_t t = 1;
  while (t < nVocab_) {
    const int32_t end = b < bias_.size() ? bias_[b].first : nVocab_;
    for (; t < end; t++) {
      if (logits[t] > bestLogit) {
        bestLogit = logits[t];
        best = t;
      }
    }
    if (t < nVocab_) {  // t == bias_[b].first
      const float v = logits[t] + bias_[b++].second;
      if (v > bestLogit) {
        bestLogit = v;
        best = t;
      }
      t++;
    }
  }
  if (std::isinf(bestLogit) && bestLogit < 0) return -2;  // every token banned
  return best;
}

llama_token Sampler::Sample(llama_context *ctx, int32_t idx) {
  const float *logits = llama_get_logits_ith(ctx, idx);
  if (logits == nullptr) return -1;
  // Greedy, nothing but a bias before it, no grammar: the argmax of the logits, without filling
  // (and the greedy sampler scanning) a candidate array of the whole vocabulary (262k entries on
  // Gemma 4: ~0.1 ms a token).
  if ((useGreedy_ || normalIsGreedy_) && plainPre_ && biasUsable_ && !Constrained()) {
    const llama_token tok = ArgmaxBiased(logits);
    if (tok < 0) return tok;
    return Accept(tok) ? tok : -2;
  }
  FillCandidates(logits);
  llama_token_data_array arr = {cur_.data(), cur_.size(), -1, false};
  llama_sampler *tail = useGreedy_ ? greedy_ : normal_;
  const bool greedy = useGreedy_ || normalIsGreedy_;
  try {
    if (pre_ != nullptr) llama_sampler_apply(pre_, &arr);
    llama_sampler_apply(tail, &arr);
    if (arr.selected < 0 || static_cast<size_t>(arr.selected) >= arr.size) return -1;
    if (Constrained() && !Allowed(arr.data[arr.selected])) {
      // The tail's pick breaks a grammar: pick again among allowed candidates only. The tail
      // sorted and truncated `arr`, so start again from the logits (bias and penalties are
      // stateless until the next accept).
      FillCandidates(logits);
      arr = {cur_.data(), cur_.size(), -1, false};
      if (pre_ != nullptr) llama_sampler_apply(pre_, &arr);
      // Greedy needs the best allowed token; top-k the k best allowed ones (the same set a
      // grammar applied before top-k leaves). Either is found among the best candidates, so
      // the whole vocabulary is masked only when those run out.
      const size_t want = greedy ? 1 : static_cast<size_t>(std::max(0, topK_));
      if (want > 0 && TopAllowed(arr, want, std::max<size_t>(256, 4 * want))) {
        if (top_.empty()) return -2;
        if (greedy) return Accept(top_[0].id) ? top_[0].id : -2;
        arr = {top_.data(), top_.size(), -1, true};
      } else {
        MaskRefused(&arr);
        bool any = false;
        for (size_t i = 0; i < arr.size && !any; i++) any = !std::isinf(arr.data[i].logit);
        if (!any) return -2;
      }
      llama_sampler_apply(tail, &arr);
      if (arr.selected < 0 || static_cast<size_t>(arr.selected) >= arr.size) return -1;
    }
  } catch (const std::exception &e) {
    if (std::strstr(e.what(), kGrammarStackLimitError) != nullptr) overStackLimit_ = true;
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
    if (pre_ != nullptr) llama_sampler_accept(pre_, t);
    if (grammar_ != nullptr) llama_sampler_accept(grammar_, t);
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
