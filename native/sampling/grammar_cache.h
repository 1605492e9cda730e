// Parsed tool-call grammars, kept per GBNF text so a tool set that recurs (every turn of an
// agent loop) is parsed once; each request gets a clone. Engine thread only.
#pragma once
#include <llama.h>

#include <deque>
#include <string>
#include <unordered_map>

namespace llamux {

// The most parse stacks a grammar may hold. An ambiguous grammar (alternatives that match the
// same text, nested) doubles its stacks with every level, and the engine thread checks every
// stack against the candidates of every token: past this bound the request fails alone
// (GRAMMAR_FAILED) instead of stalling every sequence of the context. llama.cpp checks it per
// character while it accepts a token (the grammar-stack-cap patch in scripts/llama-patches.mjs,
// LLAMUX_GRAMMAR_MAX_STACKS, the same number) and throws kGrammarStackLimitError.
constexpr size_t kMaxGrammarStacks = 1024;
constexpr const char *kGrammarStackLimitError = "llamux: grammar stack limit exceeded";

class GrammarCache {
 public:
  explicit GrammarCache(size_t limit = 32) : limit_(limit) {}
  ~GrammarCache();
  GrammarCache(const GrammarCache &) = delete;
  GrammarCache &operator=(const GrammarCache &) = delete;

  // A new grammar sampler for `gbnf` (the caller owns it), or nullptr when it does not parse.
  llama_sampler *Get(const llama_vocab *vocab, const std::string &gbnf, const std::string &root);

 private:
  static void Warm(const llama_vocab *vocab, llama_sampler *g);
  size_t limit_;
  std::unordered_map<std::string, llama_sampler *> parsed_;
  std::deque<std::string> order_;  // oldest first
};

}  // namespace llamux
