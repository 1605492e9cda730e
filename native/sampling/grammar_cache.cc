#include "sampling/grammar_cache.h"

#include <exception>
#include <vector>

namespace llamux {

// One apply over the whole vocabulary in the start state builds the grammar's token-piece
// table and remembers which tokens the start state refuses; every clone shares the table and
// copies the mask (the grammar-piece-cache and grammar-mask-cache-clone patches), so a request
// whose grammar is active from its first token (a required call) checks no token again.
void GrammarCache::Warm(const llama_vocab *vocab, llama_sampler *g) {
  const int32_t n = llama_vocab_n_tokens(vocab);
  std::vector<llama_token_data> all(static_cast<size_t>(n));
  for (int32_t t = 0; t < n; t++) all[static_cast<size_t>(t)] = {t, 0.0f, 0.0f};
  llama_token_data_array arr = {all.data(), all.size(), -1, false};
  try {
    llama_sampler_apply(g, &arr);
  } catch (const std::exception &) {
    // a grammar that throws here throws again in the request, which reports it
  }
}

GrammarCache::~GrammarCache() {
  for (auto &e : parsed_) llama_sampler_free(e.second);
}

llama_sampler *GrammarCache::Get(const llama_vocab *vocab, const std::string &gbnf, const std::string &root) {
  std::string key = root;
  key.push_back('\0');
  key += gbnf;
  auto it = parsed_.find(key);
  if (it == parsed_.end()) {
    llama_sampler *g = llama_sampler_init_grammar(vocab, gbnf.c_str(), root.c_str());
    if (g == nullptr) return nullptr;
    Warm(vocab, g);
    if (parsed_.size() >= limit_ && !order_.empty()) {
      auto old = parsed_.find(order_.front());
      if (old != parsed_.end()) {
        llama_sampler_free(old->second);
        parsed_.erase(old);
      }
      order_.pop_front();
    }
    it = parsed_.emplace(key, g).first;
    order_.push_back(key);
  }
  return llama_sampler_clone(it->second);
}

}  // namespace llamux
