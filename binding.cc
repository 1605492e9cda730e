// Registers the native classes; nothing else.
#include <napi.h>

#include "js/addon.h"
#include "js/context.h"
#include "media/media_js.h"
#include "model/model.h"
#include "testing/testing.h"

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  llamux::addon::Init(env, exports);
  llamux::Model::Init(env, exports);
  llamux::Context::Init(env, exports);
  llamux::media::Init(env, exports);
  llamux::testing::Init(env, exports);
  return exports;
}

NODE_API_MODULE(llamux, Init)
