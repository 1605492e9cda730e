// Sampler chains for one request: logit transforms (bias, penalties), the request's grammar,
// then a tail that picks — the normal tail built from the request's settings and, when tool-call
// markers are configured, a greedy tail for the wrapper syntax. Every sampled token is accepted
// by every part so penalty and grammar state never drift. A tool-call grammar (per request,
// optional) constrains like the request's grammar while it is active.
//
// Constraints are checked on the pick first (as llama.cpp's common sampler does): only when the
// tail's pick is refused are the candidates masked, and then only the best ones by logit when
// that decides the result (greedy: the best allowed of the top 64; top-k: the k best allowed),
// the whole vocabulary otherwise. A grammar request on a model that strays from it every token
// then costs a few dozen grammar checks per token instead of one per vocabulary entry.
#pragma once
#include <llama.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace llamux {

struct SamplerParams {
  float temperature = 0.8f;
  int32_t topK = 40;
  float topP = 0.95f;
  float minP = 0.05f;
  float typicalP = 1.0f;
  float repeatPenalty = 1.0f;
  float frequencyPenalty = 0.0f;
  float presencePenalty = 0.0f;
  int32_t penaltyLastN = 64;
  uint32_t seed = LLAMA_DEFAULT_SEED;
  std::vector<std::pair<int32_t, float>> logitBias;
  std::string grammar;
  std::string grammarRoot = "root";
};

class Sampler {
 public:
  Sampler() = default;
  ~Sampler();
  Sampler(const Sampler &) = delete;
  Sampler &operator=(const Sampler &) = delete;

  // Builds the chains; returns false with `error` set when the grammar does not parse.
  bool Init(const llama_vocab *vocab, const SamplerParams &p, bool withGreedy, std::string *error);

  // Samples from output row `idx` of the last decode with the active chain, then accepts
  // the token on every chain. Returns -1 when llama.cpp has no logits for that row, -2 when
  // no token is allowed (a grammar that cannot continue).
  llama_token Sample(llama_context *ctx, int32_t idx);

  // Feeds a token to every chain; false when a chain (a grammar) rejects it.
  bool Accept(llama_token t);

  // Tool-call grammar. Takes ownership of `grammar`. `endEog`: the end marker when it is one
  // end-of-generation token (every other EOG token is then refused inside a span), else -1.
  void SetToolGrammar(llama_sampler *grammar, llama_token endEog, const std::vector<llama_token> *eogTokens);
  bool HasToolGrammar() const { return tool_ != nullptr; }
  bool ToolGrammarActive() const { return toolActive_; }
  // Starts constraining from the grammar's start, feeding it `prefix` (start-marker tokens
  // already sampled). False when the grammar refuses them.
  bool StartToolGrammar(const std::vector<llama_token> &prefix);
  void StopToolGrammar() { toolActive_ = false; }

  // Speculative decoding: how many of `n` draft tokens the grammars (the request's grammar and
  // an active tool grammar) accept in order, checked on copies (the real state is untouched).
  // A draft token a grammar refuses can never be sampled, so verifying past it is wasted work.
  size_t GrammarPrefix(const llama_token *draft, size_t n);

  // Whether the request failed because its grammar's parse stacks passed kMaxGrammarStacks.
  bool OverStackLimit() const { return overStackLimit_; }

  void UseGreedy(bool on) { useGreedy_ = on && greedy_ != nullptr; }
  bool UsingGreedy() const { return useGreedy_; }
  bool HasGreedy() const { return greedy_ != nullptr; }

 private:
  bool ToolAllows(llama_token t, float logit);
  bool Constrained() const { return grammar_ != nullptr || toolActive_; }
  // Sets the logit of every candidate the active constraints refuse to -inf.
  void MaskRefused(llama_token_data_array *arr);
  bool Allowed(const llama_token_data &c);
  // Up to `want` allowed candidates, best first (logit, then id), into top_, looking at the
  // `scan` best candidates of `arr`. True when top_ is the answer: `want` found, or every
  // candidate looked at.
  bool TopAllowed(const llama_token_data_array &arr, size_t want, size_t scan);
  void FillCandidates(const float *logits);
  // Greedy without penalties or constraints: the first token of the highest (biased) logit,
  // read straight from the logits; what llama.cpp's logit-bias and greedy samplers pick.
  llama_token ArgmaxBiased(const float *logits) const;
  llama_sampler *BuildTail(const SamplerParams &p, bool greedy);

  llama_sampler *pre_ = nullptr;      // logit bias and penalties (null when neither is set)
  llama_sampler *grammar_ = nullptr;  // the request's grammar (null without one)
  llama_sampler *normal_ = nullptr;   // the request's tail: top-k … dist, or greedy
  llama_sampler *greedy_ = nullptr;   // greedy tail for tool-call syntax (when enabled)
  bool useGreedy_ = false;
  bool normalIsGreedy_ = false;  // temperature <= 0: the request's tail is greedy too
  bool plainPre_ = true;         // pre_ holds at most a logit bias (no penalties)
  std::vector<std::pair<int32_t, float>> bias_;  // that bias, by token
  bool biasUsable_ = true;       // false: a token biased twice or out of range (use the chain)
  int32_t topK_ = 0;
  std::vector<size_t> order_;
  std::vector<llama_token_data> top_;
  llama_sampler *tool_ = nullptr;
  // The tool grammar as it came (its start state, never fed): each span's grammar is a clone of
  // it. llama.cpp's reset would parse the GBNF again and drop the remembered masks.
  llama_sampler *toolStart_ = nullptr;
  bool toolActive_ = false;
  bool overStackLimit_ = false;
  llama_token toolEndEog_ = -1;
  const std::vector<llama_token> *eogTokens_ = nullptr;
  int32_t nVocab_ = 0;
  std::vector<llama_token_data> cur_;
};

}  // namespace llamux
