/**
 * A reader of Server-Sent Events (the text/event-stream format of the HTML standard)
 * over a fetch body, written here so that the client needs no module beyond the
 * platform's fetch, TextDecoder and ReadableStream (browsers and Node alike). A parser
 * package (eventsource-parser) would be a bare import, which a browser cannot load as
 * the dashboard loads this module, and which test/client/client-module.test.ts refuses.
 */

export interface ServerSentEvent {
  event: string;
  data: string;
  id: string | null;
}

export interface ReadOptions {
  /**
   * Hears each `retry:` field: the reconnection time, ms, the server asks for. A value
   * that is not all ASCII digits is ignored, as the standard says.
   */
  onRetry?: (ms: number) => void;
}

export async function* readServerSentEvents(
  body: ReadableStream<Uint8Array>,
  options: ReadOptions = {},
): AsyncGenerator<ServerSentEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let event = '';
  let data: string[] = [];
  let id: string | null = null;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      // Lines end in CRLF, LF or CR; a CR at the very end may be half of a CRLF still to come.
      for (let end = lineEnd(buffer, done); end !== -1; end = lineEnd(buffer, done)) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(buffer.startsWith('\r\n', end) ? end + 2 : end + 1);
        if (line === '') {
          if (data.length > 0) yield { event: event === '' ? 'message' : event, data: data.join('\n'), id };
          event = '';
          data = [];
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon === -1 ? line : line.slice(0, colon);
        let value = colon === -1 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'event') event = value;
        else if (field === 'data') data.push(value);
        else if (field === 'id' && !value.includes('\0')) id = value;
        else if (field === 'retry' && /^[0-9]+$/.test(value)) options.onRetry?.(Number(value));
      }
      // An event not closed by a blank line when the stream ends is dropped, as the standard says.
      if (done) return;
    }
  } finally {
    // Leaving early (break, an error) cancels the body, which closes the connection.
    await reader.cancel().catch(() => undefined);
    reader.releaseLock();
  }
}

function lineEnd(buffer: string, ended: boolean): number {
  for (let index = 0; index < buffer.length; index++) {
    const char = buffer[index];
    if (char === '\n') return index;
    if (char === '\r') return index + 1 < buffer.length || ended ? index : -1;
  }
  return -1;
}
