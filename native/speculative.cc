#include "speculative.h"

#include <algorithm>

namespace llamux {
namespace spec {

void NgramDraft(const std::vector<llama_token> &tokens, uint32_t ngramMin, uint32_t ngramMax, size_t maxLen,
                std::vector<llama_token> *out) {
  out->clear();
  const size_t size = tokens.size();
  if (maxLen == 0 || ngramMin == 0 || size < 2) return;
  for (size_t n = std::min<size_t>(ngramMax, size - 1); n >= ngramMin && n >= 1; n--) {
    if (size < n + 1) continue;
    const llama_token *key = tokens.data() + size - n;
    // Newest first: recent text (this turn's output, the latest file contents) predicts best.
    for (size_t start = size - n; start-- > 0;) {
      if (tokens[start] != key[0] || !std::equal(key, key + n, tokens.begin() + static_cast<long>(start))) continue;
      size_t from = start + n;  // < size: start < size - n
      size_t len = std::min(maxLen, size - from);
      out->assign(tokens.begin() + static_cast<long>(from), tokens.begin() + static_cast<long>(from + len));
      return;
    }
    if (n == 1) break;
  }
}

void Update(SpecState &s, const SpecConfig &cfg, size_t drafted, size_t accepted) {
  // Lengths fill the CPU matrix kernels' tiles of 4 activation rows (the pending token and 3, 7,
  // 11 ... drafts): on x86 llamafile's sgemm computes a 5-row verification as a 4-row tile and a
  // 1-row one, and a tile's rows cost little more than one row while the next tile costs nearly a
  // step (bench speculative: 1-row step 7.4 ms, 2-4 rows 12.4 ms, 5-8 rows ~21 ms, 13 rows ~36 ms
  // on the scripted 170 M target, 2 threads). A full acceptance grows the draft by one tile; a
  // partial one goes back to one tile.
  if (accepted == drafted) {
    s.length = std::min<uint32_t>(cfg.draftMax, s.length + kTileRows);
    s.backoff = 0;
    return;
  }
  s.length = std::min<uint32_t>(cfg.draftMax, kFirstDraft);
  // Less than half of the draft kept: drafts here mostly miss, and a verified row costs more
  // than the token it may save (a chance match of 1 in 3 used to reset the pause, so text that
  // merely resembles the prompt verified almost every tick: 0.70x at 0 % agreement).
  if (accepted * 2 < drafted) {
    s.backoff = std::min<uint32_t>(32, s.backoff == 0 ? 1 : s.backoff * 2);
    s.skip = s.backoff;
  } else {
    s.backoff = 0;
  }
}

}  // namespace spec
}  // namespace llamux
