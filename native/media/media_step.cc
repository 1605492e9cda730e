#include "media/media_step.h"

#include <algorithm>

#include <mtmd-helper.h>
#include <mtmd.h>

#include "engine/command_queue.h"
#include "engine/lifecycle.h"
#include "engine/thread_pools.h"
#include "kv/sequence.h"

namespace llamux::media {

size_t MediaStep::TextRun(const Request &r, size_t n) {
  const size_t end = std::min(r.tokens.size(), r.nPast + n);
  size_t i = r.nPast;
  while (i < end && !IsMediaToken(r.tokens[i])) i++;
  return i - r.nPast;
}

MediaChunkPtr MediaStep::Chunk(const Request &r) const {
  const llama_token *at = r.tokens.data() + r.nPast;
  const size_t left = r.tokens.size() - r.nPast;
  for (const auto &c : r.p->media) {
    if (c->ids.size() <= left && std::equal(c->ids.begin(), c->ids.end(), at)) return c;
  }
  // media of an earlier turn of the session, recomputed (its KV was dropped)
  return projector_ ? projector_->Find(at, left) : nullptr;
}

MediaStep::Result MediaStep::Step(const std::vector<std::unique_ptr<Request>> &active) {
  for (auto &rp : active) {
    Request &r = *rp;
    if (!r.Running() || r.Seq() == nullptr || !AtMedia(r)) continue;
    MediaChunkPtr c = Chunk(r);
    if (!c) {
      life_->Fail(r, ErrorCode::InvalidArgument,
                  "The prompt holds media at position " + std::to_string(r.nPast) + " that this projector no longer holds (send it again)");
      return Result::Stepped;
    }
    if (!r.time.prefillStarted) {
      r.time.prefillStarted = true;
      r.time.prefillStart = Clock::now();
    }
    std::string error;
    if (!projector_->Encode(*c, &embd_, &error, pools_ != nullptr ? pools_->ForBatches() : nullptr)) {
      life_->Fail(r, ErrorCode::DecodeFailed, "Encoding the media at position " + std::to_string(r.nPast) + " failed: " + error);
      return Result::Stepped;
    }
    queue_->DecodeStarts({r.p->id});
    Sequence &seq = *r.Seq();
    // libmtmd's positions: from the sequence's next position (not the token index: an earlier
    // M-RoPE image may have advanced it by less than its length)
    const llama_pos at = seq.NextPos();
    llama_pos newPast = 0;
    int32_t ret;
    try {
      ret = mtmd_helper_decode_image_chunk(projector_->Ctx(), ctx_, c->chunk, embd_.data(), at, seq.Id(), nBatch_, &newPast, nullptr, nullptr);
    } catch (const std::exception &) {
      ret = -100;
    }
    queue_->DecodeEnded();
    if (ret != 0) seq.DropUncommitted();  // part of the run may be in the KV
    if (ret == 1) return Result::NoRoom;
    if (ret == 2) return Result::Stepped;  // aborted: a cancel fails it in the next Drain, else it runs again
    if (ret != 0) {
      life_->Fail(r, ErrorCode::DecodeFailed, "Decoding the media at position " + std::to_string(r.nPast) + " failed with code " + std::to_string(ret));
      return Result::Stepped;
    }
    // As llama-server: the position advances by what libmtmd says (an M-RoPE image: its larger
    // side in merged patches, all its cells at `at`); the token list by one id per embedding.
    const bool oneCell = projector_->Info().mrope && !c->audio;
    seq.AppendMedia(c->ids.data(), c->ids.size(), static_cast<size_t>(newPast - at), oneCell);
    r.nPast += c->ids.size();
    return Result::Stepped;
  }
  return Result::Idle;
}

}  // namespace llamux::media
