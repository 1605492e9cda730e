// Sequence: one llama.cpp sequence (seq_id) of a context, owning its KV cells and the token
// list that mirrors them together. The invariant "tokens_ is exactly what the KV holds for
// this seq_id, position i holding tokens_[i]" is kept here and nowhere else: this file is the
// only code that calls llama_memory_seq_* (grep for it), and the token list changes only
// through the methods below, each of which changes the KV in the same step.
//
// While a request decodes on a sequence the list grows with every decoded token (Append), so
// a busy sequence's Tokens() is its computed KV too (other requests may share from it).
//
// Checkpoints (recurrent and hybrid memories: a recurrent state keeps no per-token history,
// so its tail cannot be dropped). The Sequence keeps a short list of partial states
// (llama_state_seq_get_data_ext with LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: the recurrent part
// only, a few KiB to MiB), each taken by TakeCheckpoint() at a turn boundary: Batch stops a
// prompt one token short and takes one there, Lifecycle takes one when a request ends.
// TruncateTo(n) / DropUncommitted on such a memory restore the newest checkpoint at or below
// n (llama_state_seq_set_data_ext, then llama_memory_seq_rm drops the attention cells past it:
// the recurrent cells hold nothing past it any more) and report the position they kept;
// callers recompute from there. At most SetMaxCheckpoints (the context's kvCheckpoints,
// default kMaxCheckpoints) per sequence, oldest dropped, and kMaxCheckpointBytes in all.
// CopyState/StateSize carry the checkpoints with the full state (an envelope, "LXCP"), so the
// RAM and disk tiers keep them under their budgets and Restore brings them back; ShareFrom
// copies them. Attention-only memories take none.
//
// Positions. A token's KV position is its index, except past a media run decoded with M-RoPE
// (Qwen-VL style, media/media_step.h): libmtmd puts all of an image's cells at one position
// (its 2D layout goes in the other rope dimensions) and advances the next position by the
// image's larger side in merged patches, not by its number of embeddings. Such a run is a
// PosRun here; every call that turns token indices into KV positions (truncation, copies,
// restores, the next decode's position) goes through PosAt(). A run is never cut in the
// middle: TruncateTo/KeepableAt/ShareFrom round down to its start. Saved states carry the
// runs (an "LXPS" section ahead of the rest); a state whose tokens hold media on an M-RoPE
// model without that section (written before positions were tracked) is refused on restore,
// and every restore checks the KV's last position against the runs'.
//
// Room for what comes next:
//   - draft rollback is AcceptDraft (recurrent/hybrid memories through llama.cpp's rollback
//     snapshots where it has them, see speculative.h).
//   - a deterministic mode: the batch shape a sequence is decoded with is the only input it
//     does not own yet; a per-sequence decode policy would live here too.
// Plain C++, engine thread only.
#pragma once
#include <llama.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace llamux {

using Clock = std::chrono::steady_clock;
using SessionHandle = uint64_t;  // as in request.h: a session's number, 0 for none

struct Request;
class StateTiers;

// Why a sequence's KV is about to be overwritten; decides whether it is worth saving first
// (Sequence::SaveIfWorth, the one place of that rule).
enum class Overwrite : uint8_t {
  Replace,  // another source's KV replaces it (session / shared / RAM / disk restore)
  Trim,     // it is trimmed to the prefix a new prompt shares with it
  Fork,     // it is cleared to receive a forked session
};

class Sequence {
 public:
  Sequence(llama_context *ctx, int32_t id);

  int32_t Id() const { return id_; }
  // What the KV holds, in order (for a busy sequence: its request's computed tokens).
  const std::vector<llama_token> &Tokens() const { return tokens_; }
  size_t Size() const { return tokens_.size(); }
  bool Empty() const { return tokens_.empty(); }

  // ---- KV and token list together -------------------------------------------------------
  // Drops every cell.
  void Clear();
  // Keeps the first n tokens (no-op when it holds n or fewer). Returns the tokens it holds
  // afterwards: n, or fewer when the memory cannot drop that tail (recurrent/hybrid: the
  // newest checkpoint at or below n, or 0 and cleared when there is none). TruncateTo(0) clears.
  size_t TruncateTo(size_t n);
  // What TruncateTo(n) would keep, without changing anything.
  size_t KeepableAt(size_t n) const;
  // Becomes src's first n tokens: cells are copied by tag (shared, no copy, in a unified KV).
  // n == SIZE_MAX: all of src.
  void ShareFrom(const Sequence &src, size_t n);
  // Replaces the KV with a saved state holding `tokens`. False (and cleared) when llama.cpp
  // refused the blob: a failed restore never leaves half a state behind.
  bool Restore(const std::vector<uint8_t> &blob, const std::vector<llama_token> &tokens);
  // Text tokens a successful decode just put in the KV at positions NextPos()...
  void Append(const llama_token *tokens, size_t n);
  // A media run just decoded at NextPos(): `advance` positions taken; `oneCell`: all its cells
  // at that one position (an M-RoPE image). A plain run (one position per embedding) is Append.
  void AppendMedia(const llama_token *ids, size_t n, size_t advance, bool oneCell);

  // ---- positions ------------------------------------------------------------------------
  struct PosRun {
    uint64_t at = 0;       // token index where the run starts
    uint64_t len = 0;      // its tokens (embeddings)
    uint64_t advance = 0;  // positions it takes
  };
  // The KV position of token index i (i <= Size(); Size() gives NextPos()); inside a run, the
  // run's one position.
  llama_pos PosAt(size_t i) const;
  llama_pos NextPos() const { return PosAt(tokens_.size()); }
  // n, or the start of the run n falls inside of.
  size_t Boundary(size_t n) const;
  const std::vector<PosRun> &Runs() const { return runs_; }
  // After an aborted decode: the positions llama.cpp finished beyond Size() (finished
  // ubatches stay in the KV).
  size_t ComputedBeyond() const;
  // Drops cells past Size() (what an aborted decode left half done). When the memory cannot
  // drop a tail it goes back to its newest checkpoint at or below Size(), or is cleared;
  // callers read Size() afterwards.
  void DropUncommitted();
  // Speculative decoding: a verification decode put draft cells past Size(); the first
  // `accepted` (their tokens) join the list, the others leave the KV. False (and cleared) when
  // the memory could not drop them; callers read Size() afterwards. A recurrent/hybrid memory
  // drops them through llama.cpp's rollback snapshots (the context's n_rs_seq) when it has them.
  bool AcceptDraft(const llama_token *tokens, size_t accepted);
  void SetDraftRollback(bool on) { draftRollback_ = on; }

  // ---- checkpoints (recurrent/hybrid memories) -------------------------------------------
  static constexpr size_t kMaxCheckpoints = 4;  // the default of ContextConfig::checkpoints
  static constexpr size_t kMaxCheckpointBytes = size_t(256) << 20;
  // At most `n` checkpoints (0: none, and prompts are not split for them).
  void SetMaxCheckpoints(size_t n) { maxCkpts_ = n; }
  struct Checkpoint {
    size_t pos = 0;              // tokens the state covers
    std::vector<uint8_t> state;  // partial state (LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)
  };
  // True when the memory cannot drop a tail (recurrent or hybrid) and checkpoints are kept.
  bool UsesCheckpoints() const { return partial_ && maxCkpts_ > 0; }
  // The memory cannot drop a tail (recurrent or hybrid), checkpoints or not.
  bool PartialMemory() const { return partial_; }
  // Saves a checkpoint at Size() (no-op for attention-only memories, an empty sequence, or
  // when one is there already). Returns true when one was taken.
  bool TakeCheckpoint();
  const std::vector<Checkpoint> &Checkpoints() const { return ckpts_; }
  size_t CheckpointBytes() const;
  // The newest checkpoint position at or below n in a state blob's envelope (0 when none);
  // `total`: the tokens of the whole state (returned when n >= total).
  static size_t KeepableInBlob(const std::vector<uint8_t> &blob, size_t total, size_t n);

  // ---- saved states ---------------------------------------------------------------------
  // The bytes of this sequence's state (llama_state_seq_get_data; KV only, no logits), with
  // its checkpoints (an envelope) when it has any.
  size_t StateSize() const;
  bool CopyState(std::vector<uint8_t> *blob) const;
  // Saves the KV to the state tiers (a session's state under its id, RAM only) when the tiers
  // take it. False when the RAM tier did not take it.
  bool Save(StateTiers &tiers, const std::string &session) const;
  // The one "save before overwrite" rule: `kept` of Size() tokens survive the change.
  // Never a session's own sequence (its KV is the session's, saved only when it spills).
  //   Replace: saved when anything beyond `kept` is lost.
  //   Trim:    saved when more than half is lost (a short trim is not worth a copy).
  //   Fork:    saved when it holds at least one RAM-tier block (RAM tier only).
  // True when the rule called for a save (the tiers may still have declined it): RAM-tier
  // entries looked up before may have been evicted, look them up again.
  bool SaveIfWorth(StateTiers &tiers, size_t kept, Overwrite why) const;

  // ---- context shift (engine/context_shift.h) ---------------------------------------------
  // Drops positions [keep, keep + discard) and moves the cells after them down by `discard`
  // (llama.cpp re-rotates their K at the next decode). Their KV then differs from a cold
  // prefill of the token list (those rows attended to tokens that are gone), so only the first
  // ExactPrefix() tokens may serve anyone but the request or session that owns the sequence.
  // False, with nothing changed, when the memory cannot shift (recurrent/hybrid, or llama.cpp
  // says so) or when cells after the dropped range may be shared with another sequence (a
  // unified KV tags one cell with several sequences: moving it would move it for them too).
  bool Shift(size_t keep, size_t discard);
  // Leading tokens whose KV equals a cold prefill of them (all of them unless it was shifted).
  size_t ExactPrefix() const { return exact_ < tokens_.size() ? exact_ : tokens_.size(); }
  bool Shifted() const { return exact_ < tokens_.size(); }
  // A restored state that had been shifted before it was saved (a session's own spill).
  void MarkShifted(size_t exact) {
    if (exact < exact_) exact_ = exact;
  }

  // ---- the request on it -----------------------------------------------------------------
  // The one way a request takes (Attach) or leaves (Detach) a sequence: both sides of the
  // link change together (Request::Seq()).
  void Attach(Request &r);
  void Detach();
  Request *Holder() const { return req_; }  // the request decoding on it, or nullptr when idle
  bool Busy() const { return req_ != nullptr; }

  // ---- raw cells of contexts whose owner tracks positions itself --------------------------
  // The MTP drafter's block KV (which may start at any position) and the embedder's scratch
  // contexts: their cells go through here too, so this file stays the only caller of
  // llama_memory_*. Positions >= from of `seq` (-1: all of it); every cell of `ctx`.
  static void DropCells(llama_context *ctx, int32_t seq, int32_t from);
  static void ClearCells(llama_context *ctx);

  // ---- what the scheduler keeps about it ------------------------------------------------
  std::string scope;       // the cache scope that computed it (RequestParams::cacheScope)
  bool diskDirty = false;  // write-through: its KV is not on disk yet (written when the engine idles)
  Clock::time_point lastUsed;
  // The session pinned to it (0 when free for anyone). Only SessionTable changes it.
  SessionHandle Session() const { return session_; }
  bool Pinned() const { return session_ != 0; }

 private:
  friend class SessionTable;

  llama_context *ctx_;
  llama_memory_t mem_;
  Request *req_ = nullptr;
  int32_t id_;
  bool RestoreCheckpoint(size_t n);  // newest checkpoint <= n, tokens trimmed; false: none worked
  void DropCheckpointsAbove(size_t n);

  std::vector<llama_token> tokens_;
  std::vector<PosRun> runs_;  // ascending at; empty on models without M-RoPE media
  bool mrope_ = false;        // the model takes M-RoPE positions (media runs may become PosRuns)
  void DropRunsFrom(size_t n);
  SessionHandle session_ = 0;
  bool partial_ = false;  // recurrent/hybrid memory: checkpoints instead of seq_rm of a tail
  bool draftRollback_ = false;  // ... except the last decode's draft cells (n_rs_seq snapshots)
  std::vector<Checkpoint> ckpts_;  // ascending pos
  size_t maxCkpts_ = kMaxCheckpoints;
  bool canShift_ = false;        // llama_memory_can_shift
  size_t exact_ = SIZE_MAX;      // see ExactPrefix(); SIZE_MAX: never shifted
  // Cells below this position may be shared with other sequences (ShareFrom, on either side);
  // an overestimate only costs a shift its fast path.
  mutable size_t sharedUpTo_ = 0;
  void Reset();  // the bookkeeping of an empty sequence
};

}  // namespace llamux
