#include "engine/batch.h"

#include <algorithm>
#include <cassert>
#include <mutex>
#include <shared_mutex>

#include "engine/context_shift.h"
#include "kv/prefix_retention.h"

#include "media/media_step.h"

namespace llamux {

Batch::Batch(llama_context *ctx, uint32_t capacity, uint32_t tickBudget, uint32_t sequenceContextSize)
    : ctx_(ctx), capacity_(static_cast<int32_t>(capacity)), tickBudget_(tickBudget), nCtxSeq_(sequenceContextSize) {
  batch_ = llama_batch_init(capacity_, 0, 1);
}

Batch::~Batch() {
  if (batch_.token != nullptr) llama_batch_free(batch_);
}

void Batch::Add(Request &r, size_t count, bool wantLogits) {
  r.tick.first = batch_.n_tokens;
  // text: one position per token from the sequence's next one (media runs may have advanced
  // the positions by other than their length, see Sequence::PosAt)
  const llama_pos at = r.Seq()->NextPos();
  for (size_t i = 0; i < count; i++) {
    PushRow(batch_, r.tokens[r.nPast + i], at + static_cast<llama_pos>(i), r.Seq()->Id(), wantLogits && i + 1 == count);
  }
  r.tick.count = count;
  r.tick.logitIdx = wantLogits ? batch_.n_tokens - 1 : -1;
  members_.push_back(&r);
}

// A draft's rows follow the sequence's pending token, each with logits (verified in order by
// Speculation::Verify). Only the pending token is committed by Commit; accepted drafts
// join the sequence in Speculation::Verify (Sequence::AcceptDraft), rejected ones leave the KV.
void Batch::AddDraft(Request &r) {
  const std::vector<llama_token> &draft = r.spec.draft;
  const llama_pos at = r.Seq()->NextPos() + 1;
  for (size_t i = 0; i < draft.size(); i++) PushRow(batch_, draft[i], at + static_cast<llama_pos>(i), r.Seq()->Id(), true);
  if (!draft.empty()) drafts_ = true;
}

// Debug builds check the sequence invariant every tick: a request's sequence holds exactly
// its tokens below nPast (verified over the api/hardening/replay tests while refactoring).
static void CheckMirror(const Request &r) {
  (void)r;
  assert(r.Done() || r.Seq() == nullptr ||
         (r.Seq()->Size() == r.nPast && std::equal(r.Seq()->Tokens().begin(), r.Seq()->Tokens().end(), r.tokens.begin())));
}

// Whether a request takes rows in a tick: a decoding token, or prompt (or a preempted
// request's recompute) still to prefill; a paused request prefills its prompt only.
static bool WantsRows(const Request &r) {
  return !r.Done() && r.tokens.size() > r.nPast && !(r.nGenerated > 0 && r.Paused());
}

bool Batch::Build(const std::vector<std::unique_ptr<Request>> &active) {
  // 0) A full sequence that shifts makes room first (context_shift.h).
  for (auto &rp : active) {
    if (ShiftDue(*rp, nCtxSeq_)) ShiftWindow(*rp, nCtxSeq_);
  }
  for (auto &rp : active) CheckMirror(*rp);
  batch_.n_tokens = 0;
  members_.clear();
  drafts_ = false;
  turns_.Choose(active, &WantsRows);
  // 1) One token for every decoding sequence: decoding never waits behind a prompt.
  int32_t decoders = 0;
  for (auto &rp : active) {
    const Request &r = *rp;
    if (!r.Done() && !r.Paused() && r.nGenerated > 0 && r.tokens.size() - r.nPast == 1 && turns_.InTurn(r)) decoders++;
  }
  for (auto &rp : active) {
    Request &r = *rp;
    r.tick.count = 0;
    r.tick.logitIdx = -1;
    r.tick.first = -1;
    std::vector<llama_token> &draft = r.spec.draft;
    if (r.Done() || r.Paused() || r.nGenerated == 0 || r.tokens.size() - r.nPast != 1 || !turns_.InTurn(r) ||
        batch_.n_tokens >= capacity_) {
      draft.clear();
      if (batch_.n_tokens >= capacity_) break;
      continue;
    }
    // Every decoding sequence gets its row before any draft: drafts take what is left.
    decoders--;
    int32_t room = capacity_ - batch_.n_tokens - 1 - decoders;
    if (static_cast<int32_t>(draft.size()) > std::max(0, room)) draft.resize(static_cast<size_t>(std::max(0, room)));
    Add(r, 1, true);
    AddDraft(r);
  }
  // 2) Prompt chunks, oldest request first, under the per-tick budget. A quarter of the
  //    budget is always kept for prompts so many decoders cannot starve a new request.
  int32_t nDecode = batch_.n_tokens;
  int32_t budget = static_cast<int32_t>(tickBudget_);
  int32_t prefillAllowance = std::max(budget - nDecode, std::max<int32_t>(1, budget / 4));
  prefillAllowance = std::min(prefillAllowance, capacity_ - nDecode);
  for (auto &rp : active) {
    Request &r = *rp;
    if (prefillAllowance <= 0) break;
    if (r.Done() || !turns_.InTurn(r)) continue;
    size_t pending = r.tokens.size() - r.nPast;
    if (pending == 0) continue;
    // A generating request decodes one token above; more pending means it was preempted
    // and recomputes its prompt + output here (paused: later).
    if (r.nGenerated > 0 && (pending == 1 || r.Paused())) continue;
    size_t n = std::min(pending, static_cast<size_t>(prefillAllowance));
    // text only, up to the next media run (the MediaStep decodes that)
    n = media::MediaStep::TextRun(r, n);
    if (n == 0) continue;
    // A memory that keeps checkpoints stops a prompt one token short, so a checkpoint can be
    // taken there (Commit): a later request with the same prompt keeps all but the token it
    // decodes for logits.
    if (r.Seq()->UsesCheckpoints() && r.nGenerated == 0 && r.nPrompt >= 2) {
      size_t stop = r.nPrompt - 1;
      if (r.nPast < stop && r.nPast + n > stop) n = stop - r.nPast;
    }
    // A prompt-cache breakpoint ends a chunk too: its prefix is saved after the commit.
    n = PrefixRetention::Chunk(r, n);
    if (!r.time.prefillStarted) {
      r.time.prefillStarted = true;
      r.time.prefillStart = Clock::now();
    }
    Add(r, n, n == pending && !r.p->prefillOnly);
    prefillAllowance -= static_cast<int32_t>(n);
  }
  return batch_.n_tokens > 0;
}

int32_t GuardedDecode(llama_context *ctx, const llama_batch &b) {
  try {
    return llama_decode(ctx, b);
  } catch (const std::exception &) {
    return -100;
  }
}

int32_t Batch::Decode() {
  const AdapterSet &set = turns_.Chosen();
  if (set.key == appliedKey_) return GuardedDecode(ctx_, batch_);
  // A switch: llama.cpp reserves its graph again in this decode, reading the model's adapter
  // list, which a loading adapter may be changing (AdapterLoadMutex).
  std::shared_lock<std::shared_mutex> lk(AdapterLoadMutex());
  if (!ApplyAdapters(ctx_, set)) return -101;
  appliedKey_ = set.key;
  return GuardedDecode(ctx_, batch_);
}

void Batch::Commit() {
  for (Request *rp : members_) {
    Request &r = *rp;
    r.Seq()->Append(r.tokens.data() + r.nPast, r.tick.count);
    r.nPast += r.tick.count;
    // a turn boundary: the prompt minus its last token (see Build)
    if (r.nGenerated == 0 && r.nPrompt >= 2 && r.nPast == r.nPrompt - 1) r.Seq()->TakeCheckpoint();
  }
}

void Batch::KeepComputed() {
  for (Request *rp : members_) CheckMirror(*rp);
  for (Request *rp : members_) {
    Request &r = *rp;
    if (r.Done()) continue;
    size_t keep = std::min(r.Seq()->ComputedBeyond(), r.tick.count);
    // a recurrent state is one position, not a list: nothing of an aborted decode is kept
    if (r.Seq()->PartialMemory()) keep = 0;
    if (r.tick.logitIdx >= 0 && keep == r.tick.count) keep--;
    r.Seq()->Append(r.tokens.data() + r.nPast, keep);
    r.nPast += keep;
    r.Seq()->DropUncommitted();
    r.nPast = r.Seq()->Size();  // 0 when the memory could not drop the tail
  }
}

bool Batch::FreeIdle(std::vector<Sequence> &sequences) {
  bool freed = false;
  for (auto &s : sequences) {
    if (!s.Busy() && !s.Empty()) {
      s.Clear();
      freed = true;
    }
  }
  return freed;
}

}  // namespace llamux
