// A text/event-stream parser for fetch() bodies. EventSource cannot send an Authorization header,
// so the dashboard reads SSE with fetch + ReadableStream and parses frames here (WHATWG SSE rules:
// "field: value" lines, a blank line dispatches, ":" lines are comments).

export class SseParser {
  // onEvent({id, event, data}) runs once per dispatched event.
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = '';
    this.reset();
    this.lastEventId = null;
  }

  reset() {
    this.data = [];
    this.event = '';
  }

  // Feed decoded text; complete lines are parsed, a partial line waits for the next chunk.
  push(text) {
    this.buffer += text;
    const lines = this.buffer.split('\n');
    this.buffer = lines.pop();
    for (let line of lines) {
      if (line.endsWith('\r')) line = line.slice(0, -1);
      this.line(line);
    }
  }

  line(line) {
    if (line === '') {
      if (this.data.length) this.onEvent({ id: this.lastEventId, event: this.event || 'message', data: this.data.join('\n') });
      this.reset();
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'id' && !value.includes('\0')) this.lastEventId = value;
  }
}
