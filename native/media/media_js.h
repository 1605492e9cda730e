// Node-API functions of the media path: loadProjector, tokenizeMedia (media_js.cc), and what
// Context::Submit reads of a request's media.
#pragma once
#include <napi.h>

#include <vector>

#include "media/projector.h"

namespace llamux {
struct ModelHandle;
}

namespace llamux::media {

void Init(Napi::Env env, Napi::Object exports);

// The media a request carries (the `media` value tokenizeMedia returned), and
// the check of its prompt: a media id must start a run of a known chunk (the request's own
// media, or media the projector tokenized for an earlier turn). Throws INVALID_ARGUMENT.
std::vector<MediaChunkPtr> ReadRequestMedia(Napi::Env env, Napi::Value v);
void CheckPromptMedia(Napi::Env env, const std::vector<llama_token> &prompt, const ModelHandle &model,
                      std::vector<MediaChunkPtr> *media);

}  // namespace llamux::media
