// Chat messages whose user contents hold media (images, audio): each medium is tokenized
// first (libmtmd, on a native thread: its projector's markers around its run of media ids),
// the template renders a placeholder in its place, and buildChatPrompt splices the medium's
// tokens in where the placeholder landed. Text parts stay text (no marker typed in them is
// read as media), and the rest of the prompt is built as for text-only messages.
import { randomBytes } from 'node:crypto';
import { LlamuxError, fromNative } from '../errors.js';
import { checkMediaPart } from '../engine/media.js';
import { native } from '../native/binding.js';
import type { Model } from '../model/model.js';
import { cachedMediaTokens, rememberMediaTokens } from './media-tokens-cache.js';
import { buildChatPrompt, type BuildChatPromptOptions, type ChatPrompt } from './prompt.js';
import type { ChatMessage } from './types.js';

// One nonce per model and process: the placeholders of the same conversation then render the
// same text on every request, so the template's render memo serves its earlier turns. It never
// leaves the process; private-use characters around it keep user text from spelling one by chance.
const nonces = new WeakMap<Model, string>();
function placeholderNonce(model: Model): string {
  let n = nonces.get(model);
  if (n === undefined) nonces.set(model, (n = randomBytes(6).toString('hex')));
  return n;
}

/** Whether any user message holds a media part. */
export function hasChatMedia(messages: readonly ChatMessage[]): boolean {
  return messages.some((m) => m.role === 'user' && typeof m.content !== 'string' && m.content.some((p) => p.type !== 'text'));
}

/**
 * {@link buildChatPrompt} for messages with media parts (a model loaded with a projector).
 * Errors name the part: `messages[2].content[1] (image): ...`.
 * @throws LlamuxError INVALID_ARGUMENT (bad media, or a template that drops a part), UNSUPPORTED (no projector)
 */
export async function buildChatPromptWithMedia(model: Model, messages: readonly ChatMessage[], options: BuildChatPromptOptions): Promise<ChatPrompt> {
  const prepared = await prepareChatMedia(model, messages);
  return buildChatPrompt(model, prepared.messages, { ...options, media: prepared.media });
}

/**
 * The media of the messages tokenized (libmtmd, native thread), each replaced in its message by
 * a placeholder: what buildChatPrompt's `media` option splices back (the server hands both to
 * its prompt workers).
 */
export async function prepareChatMedia(model: Model, messages: readonly ChatMessage[]): Promise<{ messages: ChatMessage[]; media: Map<string, Int32Array> }> {
  const nonce = placeholderNonce(model);
  const media = new Map<string, Int32Array>();
  const jobs: Array<Promise<void>> = [];
  let count = 0;
  const converted = messages.map((m, i): ChatMessage => {
    if (m.role !== 'user' || typeof m.content === 'string') return m;
    const text = m.content
      .map((p, j) => {
        if (p.type === 'text') return p.text;
        const where = `messages[${i}].content[${j}] (${p.type})`;
        if (++count > model.mediaLimits.maxPerPrompt) throw new LlamuxError('INVALID_ARGUMENT', `${where}: more than ${model.mediaLimits.maxPerPrompt} media parts in one prompt (mediaLimits.maxPerPrompt)`);
        const bytes = checkMediaPart(model, p, where);
        // private-use characters around a nonce: no template writes them, no user text holds this one
        const placeholder = `\u{E000}${nonce}:${count}\u{E001}`;
        const cached = cachedMediaTokens(model, bytes);
        if (cached.tokens) {
          media.set(placeholder, cached.tokens);
          return placeholder;
        }
        jobs.push(
          native.tokenizeMedia(model.nativeHandle(), [bytes], false, false, model.mediaLimits.maxPixels, model.mediaLimits.maxAudioSeconds).then(
            (r) => {
              media.set(placeholder, r.tokens);
              rememberMediaTokens(model, cached.key, r.tokens);
            },
            (e) => {
              const err = fromNative(e);
              throw new LlamuxError(err.code, `${where}: ${err.message.replace(/^Prompt part \d+ /, '')}`, { cause: e });
            },
          ),
        );
        return placeholder;
      })
      .join('');
    return { role: 'user', content: text };
  });
  await Promise.all(jobs);
  return { messages: converted, media };
}
