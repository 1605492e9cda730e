// The images of a /v1/responses request (`input_image` parts of user messages): checked before
// anything runs, with errors naming the part as the client sent it (`input[2].content[1]`);
// remote URLs fetched under --allow-remote-media and replaced by their bytes (a data: URL), so
// the stored response holds the image itself and a `previous_response_id` chain replays it
// exactly, whatever the remote host serves later.
import { checkMediaPart } from '../engine/media.js';
import { isLlamuxError } from '../errors.js';
import type { ModelHandle } from '../model/handle.js';
import { HttpError } from './http.js';
import { MAX_MEDIA_REDIRECTS, isRemoteUrl, resolveRemoteParts, type RemotePart } from './remote-media.js';
import type { InputItemT } from './responses-items.js';

export interface InputImageOptions {
  /** `--allow-remote-media`: http(s) URLs are fetched within this time (absent: refused). */
  remoteMediaTimeoutMs?: number;
  signal: AbortSignal;
}

type ImagePartT = { type: 'input_image'; image_url: string };

/** Each input_image part of the request's items, with where it sits. */
function imagesOf(input: string | readonly InputItemT[] | undefined): Array<{ part: ImagePartT; where: string }> {
  if (input === undefined || typeof input === 'string') return [];
  const found: Array<{ part: ImagePartT; where: string }> = [];
  input.forEach((item, i) => {
    if (item.type !== 'message' || typeof item.content === 'string') return;
    item.content.forEach((p, j) => {
      if (p.type === 'input_image') found.push({ part: p, where: `input[${i}].content[${j}]` });
    });
  });
  return found;
}

/**
 * Checks the request's images (a model that reads them; a data: URL of a supported format within
 * the media limits) and fetches remote ones when allowed. Mutates the parsed items: a fetched
 * image's `image_url` becomes its data: URL.
 * @throws HttpError 400 naming the part
 */
export async function prepareInputImages(input: string | readonly InputItemT[] | undefined, model: ModelHandle, o: InputImageOptions): Promise<void> {
  const images = imagesOf(input);
  if (images.length === 0) return;
  if (!model.capabilities.vision) {
    const { where } = images[0]!;
    throw new HttpError(400, 'invalid_request', `${where}: content parts of type "input_image" are not supported by this model: it reads no images (start the server with --mmproj and a projector that does)`, `${where}.type`);
  }
  const remote: RemotePart[] = [];
  for (const { part, where } of images) {
    if (!isRemoteUrl(part.image_url)) continue;
    if (o.remoteMediaTimeoutMs === undefined) {
      throw new HttpError(400, 'invalid_request', `${where}: remote image URLs are not fetched by this server (unless it runs with --allow-remote-media); send the image as a data: URL (base64)`, `${where}.image_url`);
    }
    remote.push({ url: part.image_url, where, param: `${where}.image_url`, set: (url) => void (part.image_url = url) });
  }
  if (remote.length) await resolveRemoteParts(remote, { maxBytes: model.mediaLimits.maxBytes, timeoutMs: o.remoteMediaTimeoutMs!, maxRedirects: MAX_MEDIA_REDIRECTS, signal: o.signal });
  for (const { part, where } of images) {
    try {
      checkMediaPart(model, { type: 'image', image: part.image_url }, where);
    } catch (e) {
      if (isLlamuxError(e)) throw new HttpError(400, 'invalid_request', e.message, `${where}.image_url`);
      throw e;
    }
  }
}
