// Token -> events: routes each sampled token through the marker matcher (tool-call spans)
// and the text stream (UTF-8 boundaries, stop strings), buffers text deltas, and builds the
// one final event of each request. Events leave in batches through the flush callback.
// Plain C++, engine thread only.
#pragma once
#include <llama.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/errors.h"
#include "sampling/marker_matcher.h"
#include "engine/request_state.h"

namespace llamux {

class Output {
 public:
  using Flush = std::function<void(std::vector<Event> &&)>;

  Output(const llama_vocab *vocab, const MarkerSet *markers, Flush flush)
      : vocab_(vocab), markers_(markers), flush_(std::move(flush)) {}

  // What a sampled token did to the generation.
  enum class Step : uint8_t {
    Continue,       // generation goes on
    Finished,       // it ended the generation: *reason says why (Eog, Stop, Length, ToolCall)
    GrammarFailed,  // the tool-call grammar could not start on a span (the request fails)
  };

  // Feeds a sampled token.
  Step OnToken(Request &r, llama_token tok, size_t nCtxSeq, FinishReason *reason);

  // The request's last events: held text is released when generation really ended there
  // (eog, length), an open span is closed as truncated, the stats are completed and the
  // final event is queued. Called by Lifecycle, which then marks the request done.
  void Finish(Request &r, FinishReason reason);
  void Fail(Request &r, ErrorCode code, const std::string &message);

  void Emit(Event &&ev) { events_.push_back(std::move(ev)); }
  // Prefill progress of a request that asked for it (RequestParams::progress): its prompt
  // tokens in the KV now, of how many, how many were reused, and the time since prefill began.
  void Progress(const Request &r, Clock::time_point now);

  // Hands queued events out. Text deltas go at most every 8 ms (kFlushIntervalUs) unless `force`;
  // ends, errors and tool-call events go at once.
  void FlushEvents(const std::vector<std::unique_ptr<Request>> &active, bool force);

 private:
  void End(Request &r, FinishReason reason, const char *code, const std::string &message);
  // Finished with Stop (a stop string) or ToolCall (a span closed, no parallel calls),
  // GrammarFailed, or Continue.
  Step ProcessOutputs(Request &r, const std::vector<MarkerMatcher::Output> &outs, FinishReason *reason);
  void EmitPendingText(Request &r, bool evenIfEmpty);
  void EmitPendingReasoning(Request &r);
  // A token outside reasoning spans: the tool-call matcher or the plain text path.
  Step OnOutputToken(Request &r, llama_token tok, FinishReason *reason);
  Step OnUndroppedToken(Request &r, llama_token tok, FinishReason *reason);
  Step FlushDropped(Request &r, FinishReason *reason);
  Step ProcessReasoning(Request &r, const std::vector<MarkerMatcher::Output> &outs, FinishReason *reason);
  void EmitSpanDelta(Request &r);
  void CloseSpan(Request &r, bool truncated);
  std::string Piece(llama_token tok, bool special) const;

  const llama_vocab *vocab_;
  const MarkerSet *markers_;
  Flush flush_;
  std::vector<Event> events_;
  std::vector<MarkerMatcher::Output> outs_;
  std::vector<MarkerMatcher::Output> reasonOuts_;
  Clock::time_point lastFlush_;
};

}  // namespace llamux
