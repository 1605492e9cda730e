#include "kv/sequence.h"

#include "engine/request_state.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kv/state_tiers.h"
#include "media/media_ids.h"

namespace llamux {

namespace {

// The envelope of a state with checkpoints: "LXCP", u32 count, count x (u64 pos, u64 bytes,
// bytes), then the full llama.cpp state. A blob without the magic is a bare llama.cpp state.
constexpr char kMagic[4] = {'L', 'X', 'C', 'P'};
// Position runs ahead of it: "LXPS", u32 count, count x (u64 at, u64 len, u64 advance).
constexpr char kPosMagic[4] = {'L', 'X', 'P', 'S'};

template <typename T>
bool ReadAt(const std::vector<uint8_t> &b, size_t *off, T *v) {
  if (*off + sizeof(T) > b.size()) return false;
  std::memcpy(v, b.data() + *off, sizeof(T));
  *off += sizeof(T);
  return true;
}

void WriteMagic(std::vector<uint8_t> *b, const char (&magic)[4]) {
  const size_t at = b->size();
  b->resize(at + 4);
  std::memcpy(b->data() + at, magic, 4);
}

template <typename T>
void WriteTo(std::vector<uint8_t> *b, T v) {
  const uint8_t *p = reinterpret_cast<const uint8_t *>(&v);
  b->insert(b->end(), p, p + sizeof(T));
}

// Parses an envelope: the checkpoint (pos, offset, bytes) triples and where the full state
// starts. False for a bare state (body = 0) or a malformed envelope.
struct EnvelopeEntry {
  size_t pos, off, bytes;
};
bool ParseEnvelope(const std::vector<uint8_t> &b, size_t start, std::vector<EnvelopeEntry> *entries, size_t *body, bool *malformed) {
  *body = start;
  *malformed = false;
  if (b.size() < start + 8 || std::memcmp(b.data() + start, kMagic, 4) != 0) return false;
  size_t off = start + 4;
  uint32_t count = 0;
  ReadAt(b, &off, &count);
  for (uint32_t i = 0; i < count; i++) {
    uint64_t pos = 0, bytes = 0;
    if (!ReadAt(b, &off, &pos) || !ReadAt(b, &off, &bytes) || bytes > b.size() - off) {
      *malformed = true;
      return false;
    }
    if (entries != nullptr) entries->push_back({static_cast<size_t>(pos), off, static_cast<size_t>(bytes)});
    off += bytes;
  }
  *body = off;
  return true;
}

// The position runs section at the blob's start: its runs and where the rest starts (0 and
// no runs when absent). False when malformed.
bool ParsePositions(const std::vector<uint8_t> &b, std::vector<Sequence::PosRun> *runs, size_t *rest) {
  *rest = 0;
  if (b.size() < 8 || std::memcmp(b.data(), kPosMagic, 4) != 0) return true;
  size_t off = 4;
  uint32_t count = 0;
  ReadAt(b, &off, &count);
  if (count > (b.size() - off) / 24) return false;
  for (uint32_t i = 0; i < count; i++) {
    Sequence::PosRun r;
    ReadAt(b, &off, &r.at);
    ReadAt(b, &off, &r.len);
    ReadAt(b, &off, &r.advance);
    if (runs != nullptr) runs->push_back(r);
  }
  *rest = off;
  return true;
}

bool HoldsMedia(const std::vector<llama_token> &tokens) {
  for (llama_token t : tokens) {
    if (media::IsMediaToken(t)) return true;
  }
  return false;
}

}  // namespace

Sequence::Sequence(llama_context *ctx, int32_t id) : ctx_(ctx), mem_(llama_get_memory(ctx)), id_(id) {
  const llama_model *m = llama_get_model(ctx);
  partial_ = llama_model_is_recurrent(m) || llama_model_is_hybrid(m);
  canShift_ = mem_ != nullptr && !partial_ && llama_memory_can_shift(mem_);
  const llama_rope_type rope = llama_model_rope_type(m);
  mrope_ = rope == LLAMA_ROPE_TYPE_MROPE || rope == LLAMA_ROPE_TYPE_IMROPE || rope == LLAMA_ROPE_TYPE_VISION;
}

llama_pos Sequence::PosAt(size_t i) const {
  int64_t delta = 0;
  for (const auto &r : runs_) {
    if (i <= r.at) break;
    if (i < r.at + r.len) return static_cast<llama_pos>(static_cast<int64_t>(r.at) + delta);  // inside: the run's one position
    delta += static_cast<int64_t>(r.advance) - static_cast<int64_t>(r.len);
  }
  return static_cast<llama_pos>(static_cast<int64_t>(i) + delta);
}

size_t Sequence::Boundary(size_t n) const {
  for (const auto &r : runs_) {
    if (n > r.at && n < r.at + r.len) return static_cast<size_t>(r.at);
  }
  return n;
}

void Sequence::DropRunsFrom(size_t n) {
  while (!runs_.empty() && runs_.back().at + runs_.back().len > n) runs_.pop_back();
}

void Sequence::Reset() {
  tokens_.clear();
  runs_.clear();
  ckpts_.clear();
  exact_ = SIZE_MAX;
  sharedUpTo_ = 0;
}

void Sequence::Clear() {
  llama_memory_seq_rm(mem_, id_, -1, -1);
  Reset();
}

// Called wherever the token list got shorter: a cut at or below the exact prefix leaves only
// exact KV.
static void AfterCut(size_t n, size_t *exact, size_t *shared) {
  if (n <= *exact) *exact = SIZE_MAX;
  if (n < *shared) *shared = n;
}

bool Sequence::Shift(size_t keep, size_t discard) {
  size_t end = keep + discard;
  // with position runs (M-RoPE media) indices and positions differ; llama.cpp cannot shift
  // M-RoPE cells anyway (llama_memory_can_shift is false there)
  if (!canShift_ || !runs_.empty() || discard == 0 || keep == 0 || end > tokens_.size() || sharedUpTo_ > end) return false;
  if (!llama_memory_seq_rm(mem_, id_, static_cast<llama_pos>(keep), static_cast<llama_pos>(end))) return false;
  llama_memory_seq_add(mem_, id_, static_cast<llama_pos>(end), -1, -static_cast<llama_pos>(discard));
  tokens_.erase(tokens_.begin() + static_cast<long>(keep), tokens_.begin() + static_cast<long>(end));
  if (keep < exact_) exact_ = keep;
  if (sharedUpTo_ > keep) sharedUpTo_ = keep;
  return true;
}

void Sequence::DropCheckpointsAbove(size_t n) {
  while (!ckpts_.empty() && ckpts_.back().pos > n) ckpts_.pop_back();
}

size_t Sequence::KeepableAt(size_t n) const {
  if (n >= tokens_.size()) return tokens_.size();
  if (!partial_) return Boundary(n);
  for (auto it = ckpts_.rbegin(); it != ckpts_.rend(); ++it) {
    if (it->pos <= n) return it->pos;
  }
  return 0;
}

bool Sequence::RestoreCheckpoint(size_t n) {
  for (auto it = ckpts_.rbegin(); it != ckpts_.rend(); ++it) {
    if (it->pos > n || it->pos == 0 || it->pos > tokens_.size()) continue;
    size_t got = 0;
    try {
      got = llama_state_seq_set_data_ext(ctx_, it->state.data(), it->state.size(), id_, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    } catch (...) {
      got = 0;
    }
    // the recurrent part now ends at pos - 1: dropping the cells from pos on only touches the
    // attention part
    if (got == 0 || !llama_memory_seq_rm(mem_, id_, PosAt(it->pos), -1)) return false;
    tokens_.resize(it->pos);
    DropRunsFrom(it->pos);
    AfterCut(it->pos, &exact_, &sharedUpTo_);
    DropCheckpointsAbove(it->pos);
    return true;
  }
  return false;
}

size_t Sequence::TruncateTo(size_t n) {
  if (n >= tokens_.size()) return tokens_.size();
  if (n == 0) {
    Clear();
    return 0;
  }
  if (partial_) {
    if (RestoreCheckpoint(n)) return tokens_.size();
    Clear();
    return 0;
  }
  n = Boundary(n);  // never inside a media run (its cells share one position)
  if (n == 0 || !llama_memory_seq_rm(mem_, id_, PosAt(n), -1)) {
    Clear();
    return 0;
  }
  tokens_.resize(n);
  DropRunsFrom(n);
  AfterCut(n, &exact_, &sharedUpTo_);
  return n;
}

bool Sequence::TakeCheckpoint() {
  if (!UsesCheckpoints() || tokens_.empty()) return false;
  if (!ckpts_.empty() && ckpts_.back().pos == tokens_.size()) return false;
  DropCheckpointsAbove(tokens_.size());
  Checkpoint c;
  c.pos = tokens_.size();
  size_t size = llama_state_seq_get_size_ext(ctx_, id_, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
  if (size == 0 || size > kMaxCheckpointBytes) return false;
  c.state.resize(size);
  size_t got = llama_state_seq_get_data_ext(ctx_, c.state.data(), c.state.size(), id_, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
  if (got == 0) return false;
  c.state.resize(got);
  ckpts_.push_back(std::move(c));
  while (ckpts_.size() > maxCkpts_ || (ckpts_.size() > 1 && CheckpointBytes() > kMaxCheckpointBytes)) {
    ckpts_.erase(ckpts_.begin());
  }
  return true;
}

size_t Sequence::CheckpointBytes() const {
  size_t n = 0;
  for (const auto &c : ckpts_) n += c.state.size();
  return n;
}

size_t Sequence::KeepableInBlob(const std::vector<uint8_t> &blob, size_t total, size_t n) {
  if (n >= total) return total;
  std::vector<EnvelopeEntry> entries;
  size_t body = 0;
  bool malformed = false;
  size_t rest = 0;
  if (!ParsePositions(blob, nullptr, &rest) || !ParseEnvelope(blob, rest, &entries, &body, &malformed)) return 0;
  size_t best = 0;
  for (const auto &e : entries) {
    if (e.pos <= n && e.pos > best) best = e.pos;
  }
  return best;
}

void Sequence::ShareFrom(const Sequence &src, size_t n) {
  Clear();
  if (n == SIZE_MAX) {
    llama_memory_seq_cp(mem_, src.id_, id_, -1, -1);
    tokens_ = src.tokens_;
    runs_ = src.runs_;
    ckpts_ = src.ckpts_;
    exact_ = src.exact_;  // a fork of a shifted sequence is as shifted
    sharedUpTo_ = tokens_.size();
    if (src.sharedUpTo_ < sharedUpTo_) src.sharedUpTo_ = sharedUpTo_;
    return;
  }
  n = src.Boundary(std::min(n, src.tokens_.size()));
  if (n > src.ExactPrefix()) exact_ = src.exact_;
  sharedUpTo_ = n;
  if (src.sharedUpTo_ < n) src.sharedUpTo_ = n;
  llama_memory_seq_cp(mem_, src.id_, id_, 0, src.PosAt(n));
  tokens_.assign(src.tokens_.begin(), src.tokens_.begin() + static_cast<long>(n));
  for (const auto &r : src.runs_) {
    if (r.at + r.len <= n) runs_.push_back(r);
  }
  for (const auto &c : src.ckpts_) {
    if (c.pos <= n) ckpts_.push_back(c);
  }
}

bool Sequence::Restore(const std::vector<uint8_t> &blob, const std::vector<llama_token> &tokens) {
  Clear();
  std::vector<EnvelopeEntry> entries;
  std::vector<PosRun> runs;
  size_t body = 0, rest = 0;
  bool malformed = !ParsePositions(blob, &runs, &rest);
  if (!malformed) ParseEnvelope(blob, rest, &entries, &body, &malformed);
  // A state without position runs whose tokens hold media on an M-RoPE model was saved before
  // positions were tracked (its text after an image sits at other positions): recomputed.
  if (runs.empty() && mrope_ && HoldsMedia(tokens)) malformed = true;
  uint64_t end = 0;  // runs ascend without overlapping, inside the token list
  for (const auto &r : runs) {
    if (r.len == 0 || r.at < end || r.at + r.len > tokens.size()) malformed = true;
    end = r.at + r.len;
  }
  size_t n = 0;
  if (!malformed && body < blob.size()) {
    try {
      n = llama_state_seq_set_data(ctx_, blob.data() + body, blob.size() - body, id_);
    } catch (...) {
      n = 0;  // llama.cpp throws on a malformed state: treated as a failed restore
    }
  }
  if (n == 0) {
    Clear();
    return false;
  }
  tokens_ = tokens;
  runs_ = std::move(runs);
  // the KV's last position must be where the runs put the last token
  if (!tokens_.empty() && llama_memory_seq_pos_max(mem_, id_) != PosAt(tokens_.size() - 1)) {
    Clear();
    return false;
  }
  if (UsesCheckpoints()) {
    for (const auto &e : entries) {
      if (e.pos == 0 || e.pos > tokens_.size()) continue;
      Checkpoint c;
      c.pos = e.pos;
      c.state.assign(blob.begin() + static_cast<long>(e.off), blob.begin() + static_cast<long>(e.off + e.bytes));
      ckpts_.push_back(std::move(c));
    }
  }
  return true;
}

void Sequence::Append(const llama_token *tokens, size_t n) { tokens_.insert(tokens_.end(), tokens, tokens + n); }

void Sequence::AppendMedia(const llama_token *ids, size_t n, size_t advance, bool oneCell) {
  if (n > 0 && (oneCell || advance != n)) runs_.push_back({tokens_.size(), n, advance});
  tokens_.insert(tokens_.end(), ids, ids + n);
}

size_t Sequence::ComputedBeyond() const {
  // text past NextPos(): one position per token
  llama_pos posMax = llama_memory_seq_pos_max(mem_, id_);
  llama_pos next = NextPos();
  return posMax >= next ? static_cast<size_t>(posMax - next) + 1 : 0;
}

void Sequence::DropUncommitted() {
  if (partial_) {
    // After an aborted decode the recurrent state may have run past Size() (llama.cpp cannot
    // drop the aborted ubatch from it): always back to the newest checkpoint at or below Size().
    size_t n = tokens_.size();
    if (n == 0 || !RestoreCheckpoint(n)) Clear();
    return;
  }
  if (!llama_memory_seq_rm(mem_, id_, NextPos(), -1)) Clear();
}

bool Sequence::AcceptDraft(const llama_token *tokens, size_t accepted) {
  Append(tokens, accepted);
  if ((partial_ && !draftRollback_) || !llama_memory_seq_rm(mem_, id_, NextPos(), -1)) {
    Clear();
    return false;
  }
  return true;
}

size_t Sequence::StateSize() const {
  size_t n = llama_state_seq_get_size(ctx_, id_);
  if (!ckpts_.empty()) n += 8 + ckpts_.size() * 16 + CheckpointBytes();
  if (!runs_.empty()) n += 8 + runs_.size() * 24;
  return n;
}

bool Sequence::CopyState(std::vector<uint8_t> *blob) const {
  size_t size = llama_state_seq_get_size(ctx_, id_);
  if (size == 0) return false;
  blob->clear();
  if (!runs_.empty()) {
    WriteMagic(blob, kPosMagic);
    WriteTo<uint32_t>(blob, static_cast<uint32_t>(runs_.size()));
    for (const auto &r : runs_) {
      WriteTo<uint64_t>(blob, r.at);
      WriteTo<uint64_t>(blob, r.len);
      WriteTo<uint64_t>(blob, r.advance);
    }
  }
  if (!ckpts_.empty()) {
    WriteMagic(blob, kMagic);
    WriteTo<uint32_t>(blob, static_cast<uint32_t>(ckpts_.size()));
    for (const auto &c : ckpts_) {
      WriteTo<uint64_t>(blob, c.pos);
      WriteTo<uint64_t>(blob, c.state.size());
      blob->insert(blob->end(), c.state.begin(), c.state.end());
    }
  }
  size_t body = blob->size();
  blob->resize(body + size);
  size_t got = llama_state_seq_get_data(ctx_, blob->data() + body, size, id_);
  if (got == 0) return false;
  blob->resize(body + got);
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

void Sequence::Attach(Request &r) {
  if (r.seq_ != nullptr) r.seq_->Detach();
  if (req_ != nullptr) req_->seq_ = nullptr;
  req_ = &r;
  r.seq_ = this;
}

void Sequence::Detach() {
  if (req_ != nullptr) req_->seq_ = nullptr;
  req_ = nullptr;
}

void Sequence::DropCells(llama_context *ctx, int32_t seq, int32_t from) {
  if (llama_memory_t mem = llama_get_memory(ctx)) llama_memory_seq_rm(mem, seq, from, -1);
}

void Sequence::ClearCells(llama_context *ctx) {
  if (llama_memory_t mem = llama_get_memory(ctx)) llama_memory_clear(mem, true);
}

}  // namespace llamux
