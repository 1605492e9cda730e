#include "grammar_cache.h"

#include <cstring>

// llama.cpp's internal grammar header: the parse stacks (llama_grammar::stacks).
#include "llama-grammar.h"

namespace llamux {

namespace {
// The context of llama.cpp's grammar sampler (llama-sampler.cpp keeps it private): the same
// members in the same order, for the pinned release.
struct GrammarSamplerCtx {
  const llama_vocab *vocab;
  std::string grammar_str;
  std::string grammar_root;
  llama_grammar *grammar;
};
}  // namespace

size_t GrammarStackCount(const llama_sampler *s) {
  if (s == nullptr) return 0;
  const char *name = llama_sampler_name(s);
  if (name != nullptr && std::strcmp(name, "grammar") == 0) {
    const auto *ctx = static_cast<const GrammarSamplerCtx *>(s->ctx);
    return ctx != nullptr && ctx->grammar != nullptr ? ctx->grammar->stacks.size() : 0;
  }
  if (name != nullptr && std::strcmp(name, "chain") == 0) {
    int n = llama_sampler_chain_n(s);
    for (int i = 0; i < n; i++) {
      size_t c = GrammarStackCount(llama_sampler_chain_get(const_cast<llama_sampler *>(s), i));
      if (c > 0) return c;
    }
  }
  return 0;
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
