// Which LoRA adapter set decodes this tick. llama.cpp applies adapters per context, so one
// llama_decode serves one set: when the requests that want rows hold different sets, each tick
// serves one of them, the one served longest ago (round robin), and the others wait a tick.
// With one set (the usual case) every request is in turn. Plain C++, engine thread only.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request_state.h"
#include "model/adapter.h"

namespace llamux {

class AdapterTurns {
 public:
  // This tick's set among the requests for which `wants` is true (the base set when none).
  const AdapterSet &Choose(const std::vector<std::unique_ptr<Request>> &active, bool (*wants)(const Request &));
  // Whether a request decodes in this tick (its set is the chosen one).
  bool InTurn(const Request &r) const { return r.p->adapters.key == chosen_.key; }
  const AdapterSet &Chosen() const { return chosen_; }

 private:
  AdapterSet chosen_;
  uint64_t tick_ = 0;
  std::unordered_map<std::string, uint64_t> served_;  // set key -> the tick it last decoded
};

}  // namespace llamux
