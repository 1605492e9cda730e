#include "state_tiers.h"

namespace llamux {

bool StateTiers::Copy(int32_t seq, std::vector<uint8_t> *blob) const {
  size_t size = llama_state_seq_get_size(ctx_, seq);
  if (size == 0) return false;
  blob->resize(size);
  size_t got = llama_state_seq_get_data(ctx_, blob->data(), blob->size(), seq);
  if (got == 0) return false;
  blob->resize(got);
  return true;
}

bool StateTiers::Save(const Sequence &s, const std::string &session) {
  if (!Any() || s.tokens.empty()) return false;
  if (session.empty() && s.tokens.size() < 16) return false;
  if (session.empty() && !s.scope.empty()) return false;  // scoped KV never enters the shared prefix tiers
  if (!ram_ && !session.empty()) return false;
  if (!ram_) {
    std::vector<uint8_t> blob;
    if (Copy(s.seq, &blob)) disk_->Save(s.tokens, std::move(blob));
    return false;
  }
  if (llama_state_seq_get_size(ctx_, s.seq) > ram_->Budget() && !disk_) return false;
  std::vector<uint8_t> blob;
  if (!Copy(s.seq, &blob)) return false;
  if (disk_ && session.empty()) disk_->Save(s.tokens, blob);  // the I/O thread writes it
  return ram_->Insert(s.tokens, std::move(blob), session);
}

bool StateTiers::Restore(Sequence &s, const std::vector<llama_token> &tokens, const std::vector<uint8_t> &blob,
                         double *ms) {
  Clock::time_point t0 = Clock::now();
  llama_memory_seq_rm(mem_, s.seq, -1, -1);
  size_t n = 0;
  try {
    n = llama_state_seq_set_data(ctx_, blob.data(), blob.size(), s.seq);
  } catch (...) {
    n = 0;  // llama.cpp throws on a malformed state: treated as a failed restore
  }
  *ms = MsBetween(t0, Clock::now());
  if (n == 0) {
    // A failed restore never leaves half a state behind: recompute instead.
    llama_memory_seq_rm(mem_, s.seq, -1, -1);
    s.tokens.clear();
    return false;
  }
  s.tokens = tokens;
  restores++;
  return true;
}

void StateTiers::SaveToDisk(const Sequence &s) {
  if (!disk_ || !s.scope.empty() || s.tokens.size() < 16 || disk_->Has(s.tokens)) return;
  // The copy-out runs on the engine thread: skip it when the write would be dropped anyway.
  if (!disk_->WouldQueue(llama_state_seq_get_size(ctx_, s.seq))) return;
  std::vector<uint8_t> blob;
  if (Copy(s.seq, &blob)) disk_->Save(s.tokens, std::move(blob));
}

void StateTiers::SaveAllToDisk(const std::vector<Sequence> &sequences, size_t minTokens) {
  if (!disk_) return;
  for (const auto &s : sequences) {
    if (s.tokens.size() < minTokens || !s.scope.empty()) continue;
    std::vector<uint8_t> blob;
    if (Copy(s.seq, &blob)) disk_->Save(s.tokens, std::move(blob));
  }
}

}  // namespace llamux
