// A streamed POST read as server-sent events with plain fetch: the agent-traffic and correctness
// suites speak three wire shapes (chat completions, Anthropic messages, Responses) to servers
// that may lack some of them, so they read the events themselves rather than through an SDK.

export interface SseEvent {
  /** The `event:` field ('' when the stream names none, as chat completions do). */
  event: string;
  /** The parsed `data:` JSON (undefined for `[DONE]`). */
  data: Record<string, unknown> | undefined;
  /** ms from the request start when the event arrived. */
  atMs: number;
}

export interface SseResult {
  status: number;
  /** The body when the status is not 2xx (or the response is not an event stream). */
  errorBody?: string;
  events: SseEvent[];
  totalMs: number;
}

/** POSTs `body` as JSON and collects the event stream; `t0` is the request start (performance.now()). */
export async function postSse(url: string, body: unknown, headers: Record<string, string> = {}, t0 = performance.now()): Promise<SseResult> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  if (!res.ok || !(res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    return { status: res.status, errorBody: await res.text(), events: [], totalMs: performance.now() - t0 };
  }
  const events: SseEvent[] = [];
  const decoder = new TextDecoder();
  let buf = '';
  let event = '';
  let data: string[] = [];
  const flush = (): void => {
    if (data.length === 0) return;
    const text = data.join('\n');
    let parsed: Record<string, unknown> | undefined;
    if (text !== '[DONE]') {
      try {
        parsed = JSON.parse(text) as Record<string, unknown>;
      } catch {
        parsed = { unparsed: text };
      }
    }
    events.push({ event, data: parsed, atMs: performance.now() - t0 });
    event = '';
    data = [];
  };
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, '');
      buf = buf.slice(nl + 1);
      if (line === '') flush();
      else if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
  }
  flush();
  return { status: res.status, events, totalMs: performance.now() - t0 };
}
