#include "engine/preemption.h"

#include "engine/batch.h"
#include "engine/lifecycle.h"

namespace llamux {

void OnKvFull(std::vector<Sequence> &sequences, const std::vector<std::unique_ptr<Request>> &active, Lifecycle &life) {
  if (Batch::FreeIdle(sequences)) return;  // retry next tick with the idle KV gone
  Request *victim = nullptr;
  size_t holding = 0;
  for (auto &rp : active) {
    Request &r = *rp;
    if (r.Done() || r.Seq() == nullptr) continue;
    holding++;
    if (victim == nullptr || r.time.submit > victim->time.submit) victim = &r;
  }
  if (victim == nullptr) return;
  if (holding == 1) {
    life.Fail(*victim, ErrorCode::KvCacheFull,
              "The KV cache is full: this request alone needs more than the context's free cells; "
              "use a larger contextSize, fewer parallel sequences, or a shorter prompt or maxTokens");
    return;
  }
  life.Preempt(*victim);
}

}  // namespace llamux
