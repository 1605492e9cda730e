#include "kv/state_tiers.h"

namespace llamux {

bool StateTiers::Save(const Sequence &s, const std::string &session) {
  const std::vector<llama_token> &tokens = s.Tokens();
  if (!Any() || tokens.empty()) return false;
  if (session.empty() && tokens.size() < 16) return false;
  if (session.empty() && !s.scope.empty()) return false;  // scoped KV never enters the shared prefix tiers
  if (session.empty() && s.Shifted()) return false;       // its tokens are no longer what its KV computed
  if (!ram_ && !session.empty()) return false;
  if (!ram_) {
    std::vector<uint8_t> blob;
    if (s.CopyState(&blob)) disk_->Save(tokens, std::move(blob));
    return false;
  }
  if (s.StateSize() > ram_->Budget() && !disk_) return false;
  std::vector<uint8_t> blob;
  if (!s.CopyState(&blob)) return false;
  if (disk_ && session.empty()) disk_->Save(tokens, blob);  // the I/O thread writes it
  return ram_->Insert(tokens, std::move(blob), session);
}

bool StateTiers::Restore(Sequence &s, const std::vector<llama_token> &tokens, const std::vector<uint8_t> &blob,
                         double *ms) {
  Clock::time_point t0 = Clock::now();
  bool ok = s.Restore(blob, tokens);
  *ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (ok) restores++;
  return ok;
}

void StateTiers::SaveToDisk(const Sequence &s) {
  const std::vector<llama_token> &tokens = s.Tokens();
  if (!disk_ || !s.scope.empty() || s.Shifted() || tokens.size() < 16 || disk_->Has(tokens)) return;
  // The copy-out runs on the engine thread: skip it when the write would be dropped anyway.
  if (!disk_->WouldQueue(s.StateSize())) return;
  std::vector<uint8_t> blob;
  if (s.CopyState(&blob)) disk_->Save(tokens, std::move(blob));
}

int StateTiers::SaveRetained(const Sequence &s, Clock::time_point until) {
  const std::vector<llama_token> &tokens = s.Tokens();
  // scoped KV (tenant isolation) never enters the shared prefix tiers; a prefix shorter than
  // a block cannot be found by a lookup
  if (!Any() || !s.scope.empty() || tokens.empty()) return 0;
  const size_t block = ram_ ? ram_->BlockSize() : 16;
  if (tokens.size() < block) return 0;
  const size_t size = s.StateSize();
  const bool toRam = ram_ && size <= ram_->Budget();
  const bool toDisk = disk_ && disk_->WouldQueue(size);
  if (!toRam && !toDisk) return 0;
  std::vector<uint8_t> blob;
  if (!s.CopyState(&blob)) return 0;
  int kept = 0;
  if (toDisk && disk_->Save(tokens, toRam ? blob : std::move(blob), until)) kept |= kDisk;
  if (toRam && ram_->Insert(tokens, std::move(blob), "", until)) kept |= kRam;
  return kept;
}

int StateTiers::Retain(const std::vector<llama_token> &tokens, Clock::time_point until) {
  int kept = 0;
  if (ram_ && ram_->Retain(tokens, until)) kept |= kRam;
  if (disk_ && disk_->Retain(tokens, until)) kept |= kDisk;
  return kept;
}

void StateTiers::SaveAllToDisk(const std::vector<Sequence> &sequences, size_t minTokens) {
  if (!disk_) return;
  for (const auto &s : sequences) {
    if (s.Size() < minTokens || !s.scope.empty() || s.Shifted()) continue;
    std::vector<uint8_t> blob;
    if (s.CopyState(&blob)) disk_->Save(s.Tokens(), std::move(blob));
  }
}

}  // namespace llamux
