#include "sampling/grammar_cache.h"

namespace llamux {

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
