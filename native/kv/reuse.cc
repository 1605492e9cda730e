#include "kv/reuse.h"

#include <algorithm>

#include "engine/gauges.h"  // CacheCounters
#include "engine/request_state.h"
#include "kv/sessions.h"
#include "kv/state_tiers.h"

namespace llamux {

Reuse::Measured Reuse::Measure(const Request &r, const Sequence &target, const SessionState *sess, bool pinned) const {
  Measured m;
  ReuseInputs &in = m.in;
  in.enabled = d_.prefixCache;
  in.canTruncate = d_.canTruncate;
  in.checkpoints = !d_.canTruncate && target.UsesCheckpoints();
  in.unifiedKv = d_.unifiedKv;
  in.pinned = pinned;
  in.promptTokens = r.tokens.size();
  // A memory that restores checkpoints keeps, of a common prefix c, the newest checkpoint at
  // or below what Apply keeps of it (one prompt token is decoded for logits).
  size_t promptLen = r.tokens.size();
  bool prefillOnly = r.p->prefillOnly;
  auto keepLimit = [promptLen, prefillOnly](size_t c) {
    return prefillOnly || promptLen == 0 ? c : std::min(c, promptLen - 1);
  };
  auto inBlob = [&](const std::vector<uint8_t> &blob, size_t total, size_t c) {
    if (!in.checkpoints) return c;
    size_t lim = keepLimit(c);
    return lim >= total ? total : Sequence::KeepableInBlob(blob, total, lim);
  };
  // Another scope's KV is never reused (tenant isolation): it counts as nothing shared.
  const std::string &scope = r.p->cacheScope;
  in.liveTokens = target.Size();
  in.liveCommon = target.scope == scope ? CommonPrefix(target.Tokens(), r.tokens) : 0;
  // A shifted sequence's KV past its exact prefix serves only the session that owns it.
  if (!pinned) in.liveCommon = std::min(in.liveCommon, target.ExactPrefix());
  if (in.checkpoints) in.liveCommon = target.KeepableAt(keepLimit(in.liveCommon));
  in.target = target.Id();
  if (!d_.prefixCache) return m;
  RamTier *ram = d_.tiers->Ram();
  // a session spilled under another scope (another tenant, or other adapters) is not restored
  if (sess != nullptr && sess->sequence < 0 && ram != nullptr && sess->scope == scope) {
    if (CacheEntry *e = ram->FindSession(SessionKey(sess->handle))) {
      m.spilled = e;
      m.spilledExact = sess->exact;
      in.hasSession = true;
      in.sessionTokens = e->tokens.size();
      in.sessionCommon = inBlob(e->blob, e->tokens.size(), CommonPrefix(e->tokens, r.tokens));
    }
  }
  if (d_.unifiedKv) {
    // A busy sequence's token list is its computed KV (positions below never change).
    for (const auto &s : *d_.sequences) {
      const std::string &owner = s.Busy() ? s.Holder()->p->cacheScope : s.scope;
      size_t c = owner == scope ? std::min(CommonPrefix(s.Tokens(), r.tokens), s.ExactPrefix()) : 0;
      // checkpoints: the whole sequence is copied, then cut back to one of its checkpoints
      if (in.checkpoints && c > 0) c = s.KeepableAt(keepLimit(c));
      in.sequenceCommon.push_back(c);
    }
  }
  if (!scope.empty()) return m;  // the prefix tiers hold shared-scope KV only
  if (ram != nullptr) {
    size_t c = 0;
    CacheEntry *e = ram->Lookup(r.tokens, &c);
    in.hasRam = e != nullptr;
    in.ramCommon = e != nullptr ? inBlob(e->blob, e->tokens.size(), c) : 0;
  }
  DiskTier *disk = d_.tiers->Disk();
  if (disk != nullptr && !r.disk.ready && !r.disk.pending) {
    size_t c = 0;
    in.hasDisk = disk->Lookup(r.tokens, &c) != nullptr;
    in.diskCommon = c;
  }
  if (r.disk.ready) {
    in.diskReady = true;
    in.diskReadyCommon = inBlob(r.disk.blob, r.disk.tokens.size(), CommonPrefix(r.disk.tokens, r.tokens));
  }
  return m;
}

void Reuse::StartDiskRead(Request &r) {
  size_t c = 0;
  DiskTier::Entry *e = d_.tiers->Disk()->Lookup(r.tokens, &c);
  r.disk.pending = true;
  r.disk.tokens = e->tokens;
  d_.tiers->Disk()->Read(r.p->id, *e);
}

size_t Reuse::Apply(Request &r, Sequence &target, ReusePlan &plan, const Measured &m, double *restoreMs) {
  const ReuseInputs &in = m.in;
  StateTiers &tiers = *d_.tiers;
  RamTier *ram = tiers.Ram();
  auto fallBack = [&] {  // the target's own KV, untouched
    plan.source = plan.liveCommon > 0 ? ReuseSource::Live : ReuseSource::None;
    plan.common = plan.liveCommon;
  };
  auto restore = [&](const std::vector<llama_token> &tokens, const std::vector<uint8_t> &blob) {
    double ms = 0;
    bool ok = tiers.Restore(target, tokens, blob, &ms);
    *restoreMs += ms;
    if (!ok) {
      plan.source = ReuseSource::None;
      plan.common = 0;
    }
    return ok;
  };
  const std::string sid = SessionKey(r.p->session);
  CacheEntry *spilled = m.spilled;  // valid until the RAM tier changes (a save may evict it)
  switch (plan.source) {
    case ReuseSource::None:
    case ReuseSource::Live:
      break;
    case ReuseSource::Session: {
      // the save may evict entries: look the session up again
      if (target.SaveIfWorth(tiers, 0, Overwrite::Replace)) spilled = ram->FindSession(sid);
      if (spilled == nullptr) {
        fallBack();
        break;
      }
      if (restore(spilled->tokens, spilled->blob)) target.MarkShifted(m.spilledExact);
      break;
    }
    case ReuseSource::Shared: {
      target.SaveIfWorth(tiers, plan.common, Overwrite::Replace);
      // A recurrent cell holds one position: the whole source is copied (with its checkpoints)
      // and cut back to plan.common below, a checkpoint restore.
      target.ShareFrom((*d_.sequences)[static_cast<size_t>(plan.shareFrom)], in.checkpoints ? SIZE_MAX : plan.common);
      d_.counters->shares++;
      break;
    }
    case ReuseSource::Ram: {
      size_t c = plan.common;
      CacheEntry *e = ram->Lookup(r.tokens, &c);
      // the save may evict entries: look the prefix up again
      if (target.SaveIfWorth(tiers, c, Overwrite::Replace)) e = ram->Lookup(r.tokens, &c);
      if (e != nullptr && in.checkpoints) {
        size_t lim = r.p->prefillOnly ? c : std::min(c, r.tokens.size() - 1);
        c = lim >= e->tokens.size() ? e->tokens.size() : Sequence::KeepableInBlob(e->blob, e->tokens.size(), lim);
      }
      if (e == nullptr || c < plan.liveCommon + in.minGain) {
        fallBack();
        break;
      }
      plan.common = c;
      if (restore(e->tokens, e->blob)) ram->Touch(e);
      break;
    }
    case ReuseSource::Disk: {
      // The blob read for this request; it was verified (checksum) on the I/O thread.
      target.SaveIfWorth(tiers, plan.common, Overwrite::Replace);
      std::vector<llama_token> tokens = std::move(r.disk.tokens);
      std::vector<uint8_t> blob = std::move(r.disk.blob);
      if (restore(tokens, blob)) d_.counters->diskRestores++;
      break;
    }
  }
  // A session that comes back onto a sequence no longer needs its spilled state.
  if (in.hasSession && ram != nullptr) {
    if (CacheEntry *e = ram->FindSession(sid)) ram->Erase(e->id);
  }
  r.disk.ready = false;
  r.disk.blob.clear();

  // Drop what the prompt does not share; keep one prompt token to decode for logits.
  size_t common = plan.common;
  bool replaced = plan.source == ReuseSource::Shared || plan.source == ReuseSource::Session ||
                  plan.source == ReuseSource::Ram || plan.source == ReuseSource::Disk;
  if (!replaced) target.SaveIfWorth(tiers, common, Overwrite::Trim);  // the old content is about to be lost
  size_t keep = r.p->prefillOnly ? common : std::min(common, r.tokens.size() - 1);
  if (keep < target.Size()) {
    // a memory that cannot drop a tail restores its newest checkpoint at or below `keep`
    bool viaCheckpoint = target.UsesCheckpoints();
    keep = target.TruncateTo(keep);
    if (viaCheckpoint && keep > 0) {
      d_.counters->checkpointRestores++;
      if (!r.preempt.resumed) r.stats.checkpoint = static_cast<int32_t>(keep);
    }
  }
  // a copy stops at the start of a media run it would cut (Sequence::Boundary)
  return std::min(keep, target.Size());
}

}  // namespace llamux
