#include "speculative/ngram_drafter.h"

#include <algorithm>

#include "engine/request_state.h"
#include "media/media_ids.h"
#include "speculative/speculative.h"

namespace llamux {

size_t NgramDrafter::Ask(Request &r, size_t maxLen, bool longMatchOnly) {
  spec::NgramDraft(r.tokens, longMatchOnly ? max_ : min_, max_, maxLen, &r.spec.draft);
  // a lookup in a prompt with media may continue into a media run: no token to sample there
  auto media = std::find_if(r.spec.draft.begin(), r.spec.draft.end(), media::IsMediaToken);
  r.spec.draft.erase(media, r.spec.draft.end());
  // A draft token a grammar refuses cannot be sampled: the draft stops before it (the
  // grammars already took the pending token when it was sampled or forced).
  r.spec.draft.resize(r.sampler.GrammarPrefix(r.spec.draft.data(), r.spec.draft.size()));
  return r.spec.draft.size();
}

}  // namespace llamux
