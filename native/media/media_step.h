// The engine part that puts media into sequences: a request whose next prompt position starts
// a run of media ids (media_ids.h) has that image or audio clip encoded by the projector and
// its embeddings decoded into the request's sequence at those positions. One encode per tick,
// on the engine thread, so a request waiting for its media holds the others back by at most
// one encode; text chunks and decodes of the other requests go on in the same tick
// (Batch::Build stops a prompt chunk before a media run). Plain C++, engine thread only.
#pragma once
#include <llama.h>

#include <memory>
#include <vector>

#include "engine/request_state.h"
#include "media/media_ids.h"
#include "media/projector.h"

namespace llamux {
class CommandQueue;
class Lifecycle;
class ThreadPools;
}

namespace llamux::media {

class MediaStep {
 public:
  enum class Result { Idle, Stepped, NoRoom };

  // pools: the context's, lent to the projector for each encode (no threads started per encode,
  // none left polling beside it)
  MediaStep(llama_context *ctx, std::shared_ptr<Projector> projector, CommandQueue *queue, Lifecycle *life, const ThreadPools *pools, int32_t nBatch)
      : ctx_(ctx), projector_(std::move(projector)), queue_(queue), life_(life), pools_(pools), nBatch_(nBatch) {}

  // Encodes and decodes the next media run of the oldest runnable request that waits on one.
  // NoRoom: the KV cache had no room for it (the scheduler frees idle KV or preempts).
  Result Step(const std::vector<std::unique_ptr<Request>> &active);

  // Whether a request's next prompt position is a media run (Batch::Build leaves it alone).
  static bool AtMedia(const Request &r) { return r.nPast < r.tokens.size() && IsMediaToken(r.tokens[r.nPast]); }
  // Prompt tokens from nPast that Batch::Build may decode as text, at most `n`.
  static size_t TextRun(const Request &r, size_t n);

 private:
  MediaChunkPtr Chunk(const Request &r) const;

  llama_context *ctx_;
  std::shared_ptr<Projector> projector_;
  CommandQueue *queue_;
  Lifecycle *life_;
  const ThreadPools *pools_;
  int32_t nBatch_;
  std::vector<float> embd_;  // reused between encodes
};

}  // namespace llamux::media
