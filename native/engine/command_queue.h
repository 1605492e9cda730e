// CommandQueue: what JS asks of the engine thread (new requests, embedding jobs, cancels,
// pauses, close) and the one lock they cross under. The JS thread only pushes; the engine
// thread takes everything at once (Take) between decodes. It also owns the abort flag that
// llama.cpp polls during a decode: a cancel of a request in the running batch, or a close,
// trips it. Plain C++.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/embedder.h"
#include "engine/request.h"

namespace llamux {

class CommandQueue {
 public:
  struct Commands {
    std::deque<std::unique_ptr<RequestParams>> submitted;
    std::deque<std::unique_ptr<EmbedJob>> embeds;
    std::vector<uint64_t> cancels;
    std::vector<std::pair<uint64_t, bool>> pauses;
  };

  // ---- JS thread ------------------------------------------------------------------------
  // False when `limit` requests already wait (submitted, not yet on a sequence).
  bool Submit(std::unique_ptr<RequestParams> params, uint32_t limit);
  void SubmitEmbed(std::unique_ptr<EmbedJob> job);
  void Cancel(uint64_t id);
  void SetPaused(uint64_t id, bool paused);
  void Close();

  // ---- engine thread ----------------------------------------------------------------------
  bool Closing();
  // Whether a command is there (something for Take).
  bool Ready();
  // Waits until a command is there, at most `d` (forever when d is negative). True when one is.
  bool Wait(std::chrono::milliseconds d);
  // Everything queued; clears the abort flag (unless closing).
  Commands Take();
  // Everything still queued at shutdown.
  Commands TakeAll();

  // The waiting count: requests that left the wait (placed, ended, failed) or came back to it.
  void Left(uint32_t n = 1);
  void Returned(uint32_t n);

  // The requests of the decode about to run: a cancel of one of them aborts it.
  void DecodeStarts(const std::vector<uint64_t> &ids);
  void DecodeEnded();
  // Forgets an abort meant for the decode that just ran (not a close).
  void ClearAbort();
  // llama.cpp's abort callback (data: the CommandQueue).
  static bool AbortCallback(void *data);

 private:
  bool ReadyLocked() const;

  std::mutex mu_;
  std::condition_variable cv_;
  Commands q_;
  bool closing_ = false;
  uint32_t waiting_ = 0;          // submitted or queued, not yet on a sequence
  std::vector<uint64_t> inBatch_; // request ids in the decode running now
  std::atomic<bool> abortNow_{false};
};

}  // namespace llamux
