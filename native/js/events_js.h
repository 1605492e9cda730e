// Engine-thread events -> JS objects: the one place that names event types, finish reasons
// and stats fields for JS (src/native/binding.ts types what it builds). JS thread only.
#pragma once
#include <napi.h>

#include <vector>

#include "engine/request.h"

namespace llamux {

// One JS array of plain objects, one per event, in order.
Napi::Array EventsToJs(Napi::Env env, const std::vector<Event> &batch);

}  // namespace llamux
