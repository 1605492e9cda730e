// Bounded, cancellable tokenization: the same tokens as one llama_tokenize() call, computed in
// pieces of bounded size so that a cancel flag is honoured between them and no piece triggers
// llama.cpp's super-linear paths (the special-token partition walks a linked list from its head
// for every match: quadratic; SPM's byte fallback reserves the output one symbol at a time:
// quadratic copies).
//
// How the pieces stay token-equal to one whole call:
// 1. Special-token partition, done here in linear time with llama.cpp's exact rule: special
//    tokens in the vocabulary's order (longest text first, the same std::sort over the same ids),
//    each splitting every remaining text fragment at its leftmost non-overlapping occurrences,
//    with LSTRIP/RSTRIP trimming whitespace next to it. Control and unknown tokens only with
//    parse_special.
// 2. Each text fragment is tokenized by llama_tokenize(fragment, add_special=false,
//    parse_special=false): llama.cpp tokenizes each fragment on its own (SPM puts its space
//    prefix before every fragment, since a fragment always follows a special token or the
//    start), and a fragment holds no special text any more, so the inner partition finds
//    nothing.
// 3. SPM fragments longer than a piece are cut where no vocabulary token spans the cut (in the
//    escaped text, spaces as U+2581): SPM only ever merges adjacent symbols into a vocabulary
//    token, so no merge crosses such a cut and each side's merge sequence is the one it has
//    alone. A piece after a cut is tokenized without llama.cpp's space prefix: either the piece
//    starts with a space (which becomes that prefix), or no token spans "▁" + the piece's start
//    and the leading "▁" token is dropped.
// 4. add_special: the tokens llama_tokenize("", add_special=true) gives, BOS before, the rest
//    after.
// Vocabulary types other than SPM and BPE are tokenized in one call (checked before and after).
#pragma once
#include <llama.h>

#include <cstdint>
#include <string>
#include <vector>

namespace llamux {

struct TokenizerIndex {
  struct Special {
    llama_token id;
    std::string text;
    uint32_t attr;
  };
  int type = 0;                     // llama_vocab_type
  std::vector<Special> specials;    // llama.cpp's partition order
  bool spacePrefix = false;         // SPM: a space goes before every text fragment
  llama_token spaceToken = LLAMA_TOKEN_NULL;  // SPM: the token whose text is "▁" alone
  std::vector<std::string> sorted;  // every token text, sorted (a compact trie)
  uint32_t firstLo[257] = {};       // sorted[firstLo[b], firstLo[b+1]) start with byte b
  size_t maxTokenBytes = 0;
  std::vector<llama_token> prefix, suffix;  // what add_special adds

  static TokenizerIndex Build(const llama_vocab *vocab);
  // The length of the longest token text that is a prefix of s[0, n) (0: none).
  size_t LongestMatch(const char *s, size_t n) const;
};

enum class TokenizeStatus { Ok, Cancelled, TooMany, Failed };

struct TokenizeOptions {
  bool addSpecial = false;
  bool parseSpecial = false;
  const int32_t *cancel = nullptr;  // non-zero (read atomically): stop at the next piece
  size_t maxTokens = 0;             // 0: no limit; else stop with TooMany past it
  size_t pieceBytes = 4096;
};

// Tokenizes `text` in bounded pieces. Appends to `out`.
TokenizeStatus BoundedTokenize(const llama_vocab *vocab, const TokenizerIndex &ix, const std::string &text,
                               const TokenizeOptions &o, std::vector<llama_token> *out);

// One plain llama_tokenize call (the reference the bounded path is tested against).
bool WholeTokenize(const llama_vocab *vocab, const std::string &text, bool addSpecial, bool parseSpecial,
                   std::vector<llama_token> *out);

}  // namespace llamux
