// Testing only (issue 26): while the tap is on, the scheduler copies the logits it samples
// from, keyed by the request's seed (a test gives each request its own) and its step (tokens
// generated so far). test/determinism compares them byte for byte across paths.
#pragma once
#include <cstdint>

namespace llamux::logits_tap {

bool On();
// Records n floats for (seed, step); the first record of a key wins.
void Record(uint32_t seed, int32_t step, const float *logits, int32_t n);

}  // namespace llamux::logits_tap
