#include "model/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <string_view>

// llama.cpp's internal vocabulary header: the only way to read add_space_prefix.
#include "llama-vocab.h"

namespace llamux {

namespace {

constexpr const char kSpace[] = "\xE2\x96\x81";  // U+2581, SPM's escaped space
// How far past a piece's target size a cut is looked for, and how far on the search resumes
// when there is none there.
constexpr size_t kSearchBytes = 1024;
constexpr size_t kSkipBytes = 16384;

bool Cancelled(const int32_t *flag) { return flag != nullptr && __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0; }

// The byte length of a UTF-8 sequence from its lead byte, as llama.cpp splits SPM symbols.
size_t Utf8Len(char c) {
  static const size_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[static_cast<uint8_t>(c) >> 4];
}

bool ValidUtf8(const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = static_cast<uint8_t>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    for (size_t k = 1; k < len; k++) {
      if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

// One llama_tokenize call without special handling; appends to out.
bool Call(const llama_vocab *vocab, const char *s, size_t n, bool addSpecial, bool parseSpecial, std::vector<llama_token> *out) {
  if (n > static_cast<size_t>(INT32_MAX / 4)) return false;
  size_t base = out->size();
  out->resize(base + n + 16);
  int32_t got = llama_tokenize(vocab, s, static_cast<int32_t>(n), out->data() + base, static_cast<int32_t>(n + 16), addSpecial, parseSpecial);
  if (got < 0) {
    if (got == INT32_MIN) {
      out->resize(base);
      return false;
    }
    out->resize(base + static_cast<size_t>(-got));
    got = llama_tokenize(vocab, s, static_cast<int32_t>(n), out->data() + base, -got, addSpecial, parseSpecial);
    if (got < 0) {
      out->resize(base);
      return false;
    }
  }
  out->resize(base + static_cast<size_t>(got));
  return true;
}

struct Fragment {
  bool token;
  llama_token id;
  size_t off, len;
};

class Run {
 public:
  Run(const llama_vocab *vocab, const TokenizerIndex &ix, const std::string &text, const TokenizeOptions &o,
      std::vector<llama_token> *out)
      : vocab_(vocab), ix_(ix), text_(text), o_(o), out_(out) {}

  TokenizeStatus Go() {
    if (o_.addSpecial) out_->insert(out_->end(), ix_.prefix.begin(), ix_.prefix.end());
    std::vector<Fragment> frags;
    if (!text_.empty()) frags.push_back({false, LLAMA_TOKEN_NULL, 0, text_.size()});
    TokenizeStatus st = Partition(&frags);
    if (st != TokenizeStatus::Ok) return st;
    for (const Fragment &f : frags) {
      if (Cancelled(o_.cancel)) return TokenizeStatus::Cancelled;
      if (f.token) {
        out_->push_back(f.id);
      } else {
        st = Text(f.off, f.len);
        if (st != TokenizeStatus::Ok) return st;
      }
      if (o_.maxTokens > 0 && out_->size() > o_.maxTokens) return TokenizeStatus::TooMany;
    }
    if (o_.addSpecial) out_->insert(out_->end(), ix_.suffix.begin(), ix_.suffix.end());
    if (o_.maxTokens > 0 && out_->size() > o_.maxTokens) return TokenizeStatus::TooMany;
    return TokenizeStatus::Ok;
  }

 private:
  // llama.cpp's tokenizer_st_partition, in linear time per special token.
  TokenizeStatus Partition(std::vector<Fragment> *frags) {
    std::vector<Fragment> next;
    for (const TokenizerIndex::Special &sp : ix_.specials) {
      if (!o_.parseSpecial && (sp.attr & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_UNKNOWN))) continue;
      if (Cancelled(o_.cancel)) return TokenizeStatus::Cancelled;
      next.clear();
      next.reserve(frags->size());
      size_t checked = 0;
      for (const Fragment &f : *frags) {
        if (f.token) {
          next.push_back(f);
          continue;
        }
        if (++checked % 1024 == 0 && Cancelled(o_.cancel)) return TokenizeStatus::Cancelled;
        size_t cur = f.off;
        const size_t end = f.off + f.len;
        const std::string_view hay(text_.data(), end);
        while (cur < end) {
          size_t m = hay.find(sp.text, cur);
          if (m == std::string_view::npos) break;
          if (m > cur) {
            size_t left = m - cur;
            if (sp.attr & LLAMA_TOKEN_ATTR_LSTRIP) {
              while (left > 0 && isspace(text_[cur + left - 1])) left--;
            }
            if (left > 0) next.push_back({false, LLAMA_TOKEN_NULL, cur, left});
          }
          next.push_back({true, sp.id, 0, 0});
          size_t r = m + sp.text.size();
          if (r < end && (sp.attr & LLAMA_TOKEN_ATTR_RSTRIP)) {
            while (r < end && isspace(text_[r])) r++;
          }
          cur = std::min(r, end);
        }
        if (cur < end) next.push_back({false, LLAMA_TOKEN_NULL, cur, end - cur});
      }
      frags->swap(next);
    }
    return TokenizeStatus::Ok;
  }

  TokenizeStatus Plain(const char *s, size_t n) {
    return Call(vocab_, s, n, false, false, out_) ? TokenizeStatus::Ok : TokenizeStatus::Failed;
  }

  // One text fragment (no special text left in it).
  TokenizeStatus Text(size_t off, size_t len) {
    const char *f = text_.data() + off;
    if (ix_.type != LLAMA_VOCAB_TYPE_SPM || len <= o_.pieceBytes || !ValidUtf8(f, len)) return Plain(f, len);
    // The escaped text SPM merges over (the space prefix, spaces as U+2581), and for each of
    // its symbol starts the raw offset it came from (npos: the prefix).
    std::string s;
    s.reserve(len + len / 2 + 4);
    std::vector<size_t> rawAt;
    rawAt.reserve(len + 4);
    std::vector<size_t> starts;  // symbol starts in s
    starts.reserve(len + 4);
    if (ix_.spacePrefix) {
      starts.push_back(0);
      rawAt.push_back(std::string::npos);
      s += kSpace;
    }
    for (size_t i = 0; i < len;) {
      size_t n = std::min(Utf8Len(f[i]), len - i);
      starts.push_back(s.size());
      rawAt.push_back(i);
      if (f[i] == ' ') s += kSpace;
      else s.append(f + i, n);
      i += n;
    }
    starts.push_back(s.size());
    rawAt.push_back(len);
    const size_t nsym = starts.size() - 1;

    size_t pieceSym = 0;  // first symbol of the current piece
    bool pieceDropsSpace = false;  // the piece's call adds a "▁" token to drop
    size_t pieceRaw = 0;           // raw offset its call starts at
    size_t scan = 0;               // symbols before this one have their reach counted
    size_t frontier = 0;           // max end (in s) of a token starting before `scan`
    while (true) {
      if (Cancelled(o_.cancel)) return TokenizeStatus::Cancelled;
      // Find a cut at least pieceBytes into the piece where no token spans.
      size_t target = starts[pieceSym] + o_.pieceBytes;
      size_t cut = nsym;
      if (target < s.size()) {
        size_t p = static_cast<size_t>(std::lower_bound(starts.begin() + pieceSym, starts.end(), target) - starts.begin());
        size_t from = target > ix_.maxTokenBytes ? target - ix_.maxTokenBytes : 0;
        size_t i = static_cast<size_t>(std::lower_bound(starts.begin(), starts.end(), from) - starts.begin());
        if (i > scan) {
          scan = i;
          frontier = 0;
        }
        size_t steps = 0;
        for (; p < nsym; p++) {
          if (starts[p] > target + kSearchBytes) {
            // No cut near the target (a run every position of which some token spans, like
            // "aaaa" or many spaces): look again further on, without scanning what lies between.
            target = starts[p] + kSkipBytes;
            if (target >= s.size()) break;
            p = static_cast<size_t>(std::lower_bound(starts.begin() + p, starts.end(), target) - starts.begin());
            size_t back = static_cast<size_t>(std::lower_bound(starts.begin(), starts.end(), target - ix_.maxTokenBytes) - starts.begin());
            if (back > scan) {
              scan = back;
              frontier = 0;
            }
            if (p >= nsym) break;
            if (Cancelled(o_.cancel)) return TokenizeStatus::Cancelled;
          }
          for (; scan < p; scan++) {
            size_t at = starts[scan];
            frontier = std::max(frontier, at + ix_.LongestMatch(s.data() + at, s.size() - at));
          }
          if (++steps % 4096 == 0 && Cancelled(o_.cancel)) return TokenizeStatus::Cancelled;
          if (frontier > starts[p]) continue;
          size_t raw = rawAt[p];
          // Never an empty piece (llama.cpp gives no tokens, not even its space prefix, for "").
          if (raw == std::string::npos || raw >= len || raw <= pieceRaw) continue;
          if (!ix_.spacePrefix) {
            cut = p;
            break;
          }
          if (f[raw] == ' ') {
            if (raw + 1 < len) {
              cut = p;
              break;
            }
            continue;
          }
          if (ix_.spaceToken == LLAMA_TOKEN_NULL) continue;
          // No token may span the "▁" llama.cpp puts before the piece and the piece's start.
          std::string probe(kSpace);
          probe.append(s, starts[p], std::min(ix_.maxTokenBytes, s.size() - starts[p]));
          if (ix_.LongestMatch(probe.data(), probe.size()) <= 3) {
            cut = p;
            break;
          }
        }
      }
      // Tokenize [pieceSym, cut).
      size_t rawEnd = cut < nsym ? rawAt[cut] : len;
      size_t before = out_->size();
      TokenizeStatus st = Plain(f + pieceRaw, rawEnd - pieceRaw);
      if (st != TokenizeStatus::Ok) return st;
      if (pieceDropsSpace) {
        if (out_->size() == before || (*out_)[before] != ix_.spaceToken) return TokenizeStatus::Failed;
        out_->erase(out_->begin() + static_cast<std::ptrdiff_t>(before));
      }
      if (o_.maxTokens > 0 && out_->size() > o_.maxTokens) return TokenizeStatus::TooMany;
      if (cut >= nsym) return TokenizeStatus::Ok;
      size_t raw = rawAt[cut];
      pieceSym = cut;
      if (ix_.spacePrefix && f[raw] == ' ') {
        pieceRaw = raw + 1;  // the space becomes llama.cpp's prefix
        pieceDropsSpace = false;
      } else {
        pieceRaw = raw;
        pieceDropsSpace = ix_.spacePrefix;
      }
    }
  }

  const llama_vocab *vocab_;
  const TokenizerIndex &ix_;
  const std::string &text_;
  const TokenizeOptions &o_;
  std::vector<llama_token> *out_;
};

}  // namespace

TokenizerIndex TokenizerIndex::Build(const llama_vocab *vocab) {
  TokenizerIndex ix;
  ix.type = static_cast<int>(llama_vocab_type(vocab));
  const int32_t n = llama_vocab_n_tokens(vocab);
  std::vector<llama_token> special;
  std::vector<std::pair<std::string, llama_token>> all;
  all.reserve(static_cast<size_t>(n));
  for (llama_token id = 0; id < n; id++) {
    uint32_t attr = static_cast<uint32_t>(llama_vocab_get_attr(vocab, id));
    if (attr & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED | LLAMA_TOKEN_ATTR_UNKNOWN)) special.push_back(id);
    const char *t = llama_vocab_get_text(vocab, id);
    if (t != nullptr && *t != '\0') all.emplace_back(t, id);
  }
  // The same sort over the same ids as llama.cpp's special-token cache, so ties of equal
  // length come out in the same order.
  std::vector<size_t> lens(static_cast<size_t>(n), 0);
  for (llama_token id : special) {
    const char *t = llama_vocab_get_text(vocab, id);
    lens[static_cast<size_t>(id)] = t != nullptr ? std::char_traits<char>::length(t) : 0;
  }
  std::sort(special.begin(), special.end(), [&](llama_token a, llama_token b) { return lens[static_cast<size_t>(a)] > lens[static_cast<size_t>(b)]; });
  for (llama_token id : special) {
    const char *t = llama_vocab_get_text(vocab, id);
    if (t == nullptr || *t == '\0') continue;  // llama.cpp would loop forever on an empty one
    ix.specials.push_back({id, t, static_cast<uint32_t>(llama_vocab_get_attr(vocab, id))});
  }
  std::sort(all.begin(), all.end());
  ix.sorted.reserve(all.size());
  for (auto &p : all) {
    ix.maxTokenBytes = std::max(ix.maxTokenBytes, p.first.size());
    if (p.first == kSpace) ix.spaceToken = p.second;
    ix.sorted.push_back(std::move(p.first));
  }
  size_t k = 0;
  for (int b = 0; b < 256; b++) {
    ix.firstLo[b] = static_cast<uint32_t>(k);
    while (k < ix.sorted.size() && static_cast<uint8_t>(ix.sorted[k][0]) == b) k++;
  }
  ix.firstLo[256] = static_cast<uint32_t>(ix.sorted.size());
  if (ix.type == LLAMA_VOCAB_TYPE_SPM) ix.spacePrefix = vocab->get_add_space_prefix();
  // What add_special adds: BOS (when the model adds one) before the text, the rest after.
  std::vector<llama_token> e;
  Call(vocab, "", 0, true, false, &e);
  size_t split = 0;
  if (ix.type == LLAMA_VOCAB_TYPE_WPM) split = e.empty() ? 0 : 1;
  else if (!e.empty() && llama_vocab_get_add_bos(vocab) && e[0] == llama_vocab_bos(vocab)) split = 1;
  ix.prefix.assign(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(split));
  ix.suffix.assign(e.begin() + static_cast<std::ptrdiff_t>(split), e.end());
  return ix;
}

size_t TokenizerIndex::LongestMatch(const char *s, size_t n) const {
  if (n == 0) return 0;
  uint8_t b0 = static_cast<uint8_t>(s[0]);
  size_t lo = firstLo[b0], hi = firstLo[b0 + 1];
  if (lo == hi) return 0;
  size_t best = sorted[lo].size() == 1 ? 1 : 0;
  // [lo, hi) share the first d bytes; strings of exactly d bytes sort first among them.
  for (size_t d = 1; d < n && d < maxTokenBytes; d++) {
    int c = static_cast<uint8_t>(s[d]);
    auto key = [d](const std::string &t) { return t.size() > d ? static_cast<int>(static_cast<uint8_t>(t[d])) : -1; };
    auto first = sorted.begin() + static_cast<std::ptrdiff_t>(lo);
    auto last = sorted.begin() + static_cast<std::ptrdiff_t>(hi);
    auto l = std::partition_point(first, last, [&](const std::string &t) { return key(t) < c; });
    auto h = std::partition_point(l, last, [&](const std::string &t) { return key(t) <= c; });
    if (l == h) break;
    lo = static_cast<size_t>(l - sorted.begin());
    hi = static_cast<size_t>(h - sorted.begin());
    if (sorted[lo].size() == d + 1) best = d + 1;
  }
  return best;
}

TokenizeStatus BoundedTokenize(const llama_vocab *vocab, const TokenizerIndex &ix, const std::string &text,
                               const TokenizeOptions &o, std::vector<llama_token> *out) {
  if (Cancelled(o.cancel)) return TokenizeStatus::Cancelled;
  bool pieces = ix.type == LLAMA_VOCAB_TYPE_SPM || ix.type == LLAMA_VOCAB_TYPE_BPE;
  if (!pieces || text.size() <= o.pieceBytes) {
    // Short text: one call is cheap (its quadratic parts are bounded by the piece size).
    size_t base = out->size();
    if (!Call(vocab, text.data(), text.size(), o.addSpecial, o.parseSpecial, out)) return TokenizeStatus::Failed;
    if (o.maxTokens > 0 && out->size() - base > o.maxTokens) return TokenizeStatus::TooMany;
    return Cancelled(o.cancel) ? TokenizeStatus::Cancelled : TokenizeStatus::Ok;
  }
  size_t base = out->size();
  std::vector<llama_token> mine;
  Run run(vocab, ix, text, o, &mine);
  TokenizeStatus st = run.Go();
  if (st == TokenizeStatus::Failed) {
    // A piece did not come out as the theory says: the one whole call is the answer.
    out->resize(base);
    if (!Call(vocab, text.data(), text.size(), o.addSpecial, o.parseSpecial, out)) return TokenizeStatus::Failed;
    return TokenizeStatus::Ok;
  }
  if (st != TokenizeStatus::Ok) return st;
  out->insert(out->end(), mine.begin(), mine.end());
  return TokenizeStatus::Ok;
}

bool WholeTokenize(const llama_vocab *vocab, const std::string &text, bool addSpecial, bool parseSpecial,
                   std::vector<llama_token> *out) {
  return Call(vocab, text.data(), text.size(), addSpecial, parseSpecial, out);
}

}  // namespace llamux
