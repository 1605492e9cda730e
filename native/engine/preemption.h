// A full KV cache: when llama_decode finds no room and no idle sequence holds KV to drop,
// one running request gives up its cells so the others finish. The victim is the youngest
// request (latest submitted); it keeps everything it produced, waits at the head of the
// queue until another request has finished (Admission), and is placed again with prompt +
// generated tokens, so its output continues where it stopped (the recompute reuses whatever
// prefix the caches still hold). Only a request alone in the cache that still does not fit
// fails, with KV_CACHE_FULL. Plain C++, engine thread only.
#pragma once
#include <memory>
#include <vector>

#include "engine/request_state.h"

namespace llamux {

class Lifecycle;

void OnKvFull(std::vector<Sequence> &sequences, const std::vector<std::unique_ptr<Request>> &active, Lifecycle &life);

}  // namespace llamux
