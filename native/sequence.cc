#include "sequence.h"

#include <cstdint>

#include "state_tiers.h"

namespace llamux {

Sequence::Sequence(llama_context *ctx, int32_t id) : ctx_(ctx), mem_(llama_get_memory(ctx)), id_(id) {}

void Sequence::Clear() {
  llama_memory_seq_rm(mem_, id_, -1, -1);
  tokens_.clear();
}

size_t Sequence::TruncateTo(size_t n) {
  if (n >= tokens_.size()) return tokens_.size();
  if (n == 0 || !llama_memory_seq_rm(mem_, id_, static_cast<llama_pos>(n), -1)) {
    Clear();
    return 0;
  }
  tokens_.resize(n);
  return n;
}

void Sequence::ShareFrom(const Sequence &src, size_t n) {
  Clear();
  if (n == SIZE_MAX) {
    llama_memory_seq_cp(mem_, src.id_, id_, -1, -1);
    tokens_ = src.tokens_;
    return;
  }
  llama_memory_seq_cp(mem_, src.id_, id_, 0, static_cast<llama_pos>(n));
  tokens_.assign(src.tokens_.begin(), src.tokens_.begin() + static_cast<long>(n));
}

bool Sequence::Restore(const std::vector<uint8_t> &blob, const std::vector<llama_token> &tokens) {
  Clear();
  size_t n = 0;
  try {
    n = llama_state_seq_set_data(ctx_, blob.data(), blob.size(), id_);
  } catch (...) {
    n = 0;  // llama.cpp throws on a malformed state: treated as a failed restore
  }
  if (n == 0) {
    Clear();
    return false;
  }
  tokens_ = tokens;
  return true;
}

void Sequence::Append(const llama_token *tokens, size_t n) { tokens_.insert(tokens_.end(), tokens, tokens + n); }

size_t Sequence::ComputedBeyond() const {
  llama_pos posMax = llama_memory_seq_pos_max(mem_, id_);
  size_t computed = posMax < 0 ? 0 : static_cast<size_t>(posMax) + 1;
  return computed > tokens_.size() ? computed - tokens_.size() : 0;
}

void Sequence::DropUncommitted() {
  if (!llama_memory_seq_rm(mem_, id_, static_cast<llama_pos>(tokens_.size()), -1)) Clear();
}

size_t Sequence::StateSize() const { return llama_state_seq_get_size(ctx_, id_); }

bool Sequence::CopyState(std::vector<uint8_t> *blob) const {
  size_t size = llama_state_seq_get_size(ctx_, id_);
  if (size == 0) return false;
  blob->resize(size);
  size_t got = llama_state_seq_get_data(ctx_, blob->data(), blob->size(), id_);
  if (got == 0) return false;
  blob->resize(got);
  return true;
}

bool Sequence::Save(StateTiers &tiers, const std::string &session) const { return tiers.Save(*this, session); }

bool Sequence::SaveIfWorth(StateTiers &tiers, size_t kept, Overwrite why) const {
  if (Pinned()) return false;
  switch (why) {
    case Overwrite::Replace:
      if (Size() <= kept) return false;
      break;
    case Overwrite::Trim:
      if (kept >= Size() / 2) return false;
      break;
    case Overwrite::Fork: {
      RamTier *ram = tiers.Ram();
      if (ram == nullptr || Size() < ram->BlockSize()) return false;
      break;
    }
  }
  tiers.Save(*this, "");
  return true;
}

}  // namespace llamux
