// Engine-thread state of one admitted or waiting request. Plain C++; only the scheduler's
// parts (sessions, reuse, batch, output) touch it. The sequence it decodes on is a Sequence
// (sequence.h), which owns the KV and its token list.
#pragma once
#include <llama.h>

#include <memory>
#include <string>
#include <vector>

#include "sampling/marker_matcher.h"
#include "engine/request.h"
#include "sampling/sampler.h"
#include "kv/sequence.h"
#include "speculative/speculative.h"
#include "engine/text_stream.h"

namespace llamux {

// Where a waiting request stands after an admission attempt.
enum class Placement { Placed, Wait, Done };

// A request's lifecycle. Lifecycle (lifecycle.h) is the only writer: every transition and
// what goes with it (events, the sequence link, the session) happens there.
//   Queued -> WaitingForSession -> Prefilling -> Decoding -> Done
//   Prefilling/Decoding <-> Paused; Prefilling/Decoding/Paused -> Preempted -> Prefilling
//   any -> Done (finished, failed, aborted)
enum class Phase : uint8_t { Queued, WaitingForSession, Prefilling, Decoding, Paused, Preempted, Done };
const char *PhaseName(Phase p);

struct SessionState;
class Lifecycle;

struct Request {
  std::unique_ptr<RequestParams> p;
  SessionState *session = nullptr;  // the session it joined (Sessions::Join), until it leaves
  std::vector<llama_token> tokens;  // prompt, then every sampled token that was fed
  size_t nPast = 0;                 // tokens[0, nPast) are in the KV (== Seq()->Size() on a sequence)
  size_t nPrompt = 0;
  int32_t nGenerated = 0;
  llama_token bos = -1;             // the vocabulary's BOS (a context shift keeps it besides nKeep)

  Phase phase() const { return phase_; }
  bool Done() const { return phase_ == Phase::Done; }
  bool Paused() const { return phase_ == Phase::Paused; }
  // Runnable: on a sequence, not paused, not done (prefilling or decoding).
  bool Running() const { return phase_ == Phase::Prefilling || phase_ == Phase::Decoding; }
  // The sequence it decodes on (nullptr while waiting). Set only by Sequence::Attach/Detach.
  Sequence *Seq() const { return seq_; }

  bool streamed = false;  // an event with its output left (the first one goes without waiting)
  Sampler sampler;
  FinalStats stats;

  // Text outside tool-call spans, on its way to a text event.
  struct TextOut {
    std::unique_ptr<TextStream> stream;  // UTF-8 boundaries and stop strings
    std::string pending;                 // text not yet in an event
    std::vector<int32_t> pendingTokens;  // its token ids (the `tokens` option)
  } text;

  // Tool-call spans (only with markers).
  struct Spans {
    std::unique_ptr<MarkerMatcher> matcher;  // nullptr: plain text path
    std::unique_ptr<TextStream> stream;
    bool open = false;
    int32_t index = 0;
    std::vector<int32_t> tokens;
    std::string text;
    std::string pending;
  } span;

  // Reasoning spans (only when the request has reasoning markers). Tokens pass through this
  // matcher first; what it releases as text goes on to the tool-call matcher.
  struct ReasoningOut {
    MarkerSet set;                           // start/end: the reasoning markers
    std::unique_ptr<MarkerMatcher> matcher;  // nullptr: no reasoning detection
    std::unique_ptr<TextStream> stream;
    std::string pending;
    std::vector<int32_t> pendingTokens;
    int32_t count = 0;                       // tokens sampled inside reasoning spans
    std::vector<llama_token> forced;         // the end marker's tokens still to force (budget)
    size_t forcedPos = 0;
  } reasoning;

  // `logprobs` requests: entries of the tokens sampled since the last text event, and the
  // scratch of their top-k sort.
  std::vector<TokenLogprob> logprobs;
  std::vector<int32_t> logprobScratch;

  // Channel headers dropped from text (RequestParams::textDrop): tokens held while they may
  // still complete one.
  std::vector<llama_token> dropHeld;

  // Speculative decoding (speculative.h): this tick's draft, the adaptive length, totals.
  SpecState spec;

  // This tick's share of the batch.
  struct TickShare {
    size_t count = 0;
    int32_t logitIdx = -1;
    int32_t first = -1;  // its first row in the batch (-1: none this tick)
  } tick;

  struct Timing {
    Clock::time_point submit, admit, prefillStart, firstToken, last;
    bool prefillStarted = false;
  } time;

  // Disk-tier restore in flight (the request waits without holding a sequence).
  struct DiskRestore {
    bool pending = false;
    bool ready = false;
    std::vector<llama_token> tokens;
    std::vector<uint8_t> blob;
  } disk;

  // Prompt-cache breakpoints (RequestParams::retain, kv/prefix_retention.h): those before
  // `next` are handled (saved, refreshed or refused), once, even across a preemption.
  struct Retention {
    size_t next = 0;
  } retain;

  // KV-full preemption (preemption.cc): the request left its sequence and waits to be
  // re-admitted with every token it had (prompt + generated), recomputed from the prefix caches.
  struct Preemption {
    bool resumed = false;      // it has been preempted at least once (admission keeps its first stats)
    uint64_t resumeAfter = 0;  // re-admit once the scheduler's finished count passes this
  } preempt;

 private:
  friend class Lifecycle;
  friend class Sequence;
  Phase phase_ = Phase::Queued;
  bool pauseAsked_ = false;  // a pause that outlives a preemption (JS paused the stream)
  Sequence *seq_ = nullptr;
};

inline double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace llamux
