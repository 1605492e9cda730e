// Engine-thread state: one admitted or waiting request, and one llama.cpp sequence of the
// context. Plain C++; only the scheduler's parts (sessions, reuse, batch, output) touch it.
#pragma once
#include <llama.h>

#include <memory>
#include <string>
#include <vector>

#include "marker_matcher.h"
#include "request.h"
#include "sampler.h"
#include "text_stream.h"

namespace llamux {

struct Request;

// One sequence (llama.cpp seq_id) of the context. Which session, if any, it is pinned to is
// kept by the SessionTable, not here.
struct Sequence {
  int32_t seq = 0;
  Request *req = nullptr;           // the request decoding on it, or nullptr when idle
  std::vector<llama_token> tokens;  // what this sequence's KV holds, in order (when idle)
  std::string scope;                // the cache scope that computed it (RequestParams::cacheScope)
  bool diskDirty = false;           // write-through: its KV is not on disk yet (written when the engine idles)
  Clock::time_point lastUsed;
};

struct Request {
  std::unique_ptr<RequestParams> p;
  Sequence *seq = nullptr;
  std::vector<llama_token> tokens;  // prompt, then every sampled token that was fed
  size_t nPast = 0;                 // tokens[0, nPast) are in the KV
  size_t nPrompt = 0;
  int32_t nGenerated = 0;
  bool paused = false;
  bool done = false;
  Sampler sampler;
  std::unique_ptr<TextStream> text;
  std::string pendingText;
  std::vector<int32_t> pendingTokens;
  // Tool-call spans (only with markers).
  std::unique_ptr<MarkerMatcher> matcher;
  std::unique_ptr<TextStream> spanStream;
  bool spanOpen = false;
  int32_t spanIndex = 0;
  std::vector<int32_t> spanTokens;
  std::string spanText;
  std::string pendingSpan;
  // This tick's share of the batch.
  size_t batchCount = 0;
  int32_t logitIdx = -1;
  Clock::time_point tSubmit, tAdmit, tPrefillStart, tFirstToken, tLast;
  bool prefillStarted = false;
  FinalStats stats;
  // Disk-tier restore in flight (the request waits without holding a sequence).
  bool diskPending = false;
  bool diskReady = false;
  std::vector<llama_token> diskTokens;
  std::vector<uint8_t> diskBlob;
  // KV-full preemption (preemption.cc): the request left its sequence and waits to be
  // re-admitted with every token it had (prompt + generated), recomputed from the prefix caches.
  bool preempted = false;    // set on the tick it lost its sequence; the loop moves it back to waiting
  bool resumed = false;      // it has been preempted at least once (admission keeps its first stats)
  uint64_t resumeAfter = 0;  // re-admit once the scheduler's finished count passes this
};

inline double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace llamux
