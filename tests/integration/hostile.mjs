// A hostile upstream: a raw TCP server on 127.0.0.1 that speaks just enough HTTP/1.1 to
// take chat requests, then misbehaves the way a broken or malicious model server can.
// Every answer carries a marker taken from the request (the last user message's text), so
// a test can tell whose answer a client received.
//
// Modes (set with setMode, one for every following request):
//   ok          a plain OpenAI answer (JSON or SSE), Content-Length or chunked
//   slow        the same, `delayMs` later
//   interim     `100 Continue` and `103 Early Hints` heads before the real answer
//   extra       the answer, then bytes after its end on the same connection (a second,
//               unasked answer carrying the marker "INJECTED")
//   endless     an SSE stream that never ends (`burst` chunks every `intervalMs`)
//   big_events  an SSE stream of `eventBytes`-byte events, `events` of them
//   bad_chunk   a chunked body with an invalid chunk-size line mid-stream
//   reset       an SSE stream cut by a TCP reset after a few events
//   short_body  Content-Length larger than the body, then the connection closes
//   redirect    302 to another host
//   hang        reads the request, never answers
//   error_text  a 500 whose body is raw text (no JSON), with secrets-like content
//   late_extra  the answer, then `delayMs` later (the connection idle in the pool) bytes
//               of a second, unasked answer carrying the marker "INJECTED"
//   close_idle  the answer, then `delayMs` later the connection closed (as a server's
//               keep-alive timeout does)
//   split_end   a chunked answer with an empty body (JSON or SSE head) whose last chunk
//               comes in three writes, "0\r\n", "\r", "\n", `delayMs` apart
import net from 'node:net';

const CRLF = '\r\n';

function markerOf(json) {
  const msgs = json?.messages;
  if (!Array.isArray(msgs) || msgs.length === 0) return 'none';
  const last = msgs[msgs.length - 1];
  return typeof last.content === 'string' ? last.content : 'none';
}

function completion(model, marker) {
  return JSON.stringify({
    id: `chatcmpl-${marker}`,
    object: 'chat.completion',
    created: 1,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: `answer for ${marker}` }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 },
  });
}

function chunk(model, content, finish = null) {
  return `data: ${JSON.stringify({
    id: 'chatcmpl-h',
    object: 'chat.completion.chunk',
    created: 1,
    model,
    choices: [{ index: 0, delta: content === null ? {} : { content }, finish_reason: finish }],
  })}\n\n`;
}

function head(status, headers) {
  const reason = { 100: 'Continue', 103: 'Early Hints', 200: 'OK', 302: 'Found', 500: 'Internal Server Error' }[status] ?? 'X';
  let h = `HTTP/1.1 ${status} ${reason}${CRLF}`;
  for (const [k, v] of Object.entries(headers)) h += `${k}: ${v}${CRLF}`;
  return h + CRLF;
}

function chunked(text) {
  return `${Buffer.byteLength(text).toString(16)}${CRLF}${text}${CRLF}`;
}

export async function startHostile({ mode = 'ok', intervalMs = 5, burst = 1, eventBytes = 1 << 20, events = 50, delayMs = 500 } = {}) {
  const state = { mode, intervalMs, burst, eventBytes, events, delayMs, requests: [], connections: 0, sockets: new Set(), lateSent: 0, idleClosed: 0 };

  function answer(sock, req) {
    const json = req.json;
    const model = json?.model ?? 'x';
    const marker = markerOf(json);
    const stream = json?.stream === true;
    state.requests.push({ marker, stream, url: req.url, mode: state.mode });
    const m = state.mode;
    const whole = (extraHeaders = {}) => {
      const body = completion(model, marker);
      return head(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...extraHeaders }) + body;
    };
    const sseHead = head(200, { 'content-type': 'text/event-stream', 'transfer-encoding': 'chunked' });
    const sseWhole = () =>
      sseHead +
      chunked(chunk(model, `answer for ${marker}`)) +
      chunked(chunk(model, null, 'stop')) +
      chunked('data: [DONE]\n\n') +
      `0${CRLF}${CRLF}`;
    switch (m) {
      case 'ok':
        sock.write(stream ? sseWhole() : whole());
        return true;
      case 'slow':
        setTimeout(() => sock.destroyed || sock.write(stream ? sseWhole() : whole()), state.delayMs);
        return true;
      case 'interim':
        sock.write(head(100, {}) + head(103, { link: '</style.css>; rel=preload' }) + (stream ? sseWhole() : whole()));
        return true;
      case 'extra': {
        const injected = completion(model, 'INJECTED');
        sock.write(
          (stream ? sseWhole() : whole()) +
            head(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(injected) }) +
            injected,
        );
        return true;
      }
      case 'late_extra': {
        sock.write(stream ? sseWhole() : whole());
        const injected = completion(model, 'INJECTED');
        setTimeout(() => {
          if (sock.destroyed) return;
          sock.write(head(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(injected) }) + injected);
          state.lateSent++;
        }, state.delayMs);
        return true;
      }
      case 'close_idle':
        sock.write(stream ? sseWhole() : whole());
        setTimeout(() => {
          sock.end();
          state.idleClosed++;
        }, state.delayMs);
        return true;
      case 'endless': {
        sock.write(sseHead);
        let i = 0;
        const timer = setInterval(() => {
          if (sock.destroyed) return clearInterval(timer);
          let batch = '';
          for (let b = 0; b < state.burst; b++) batch += chunked(chunk(model, `t${i++} `));
          sock.write(batch);
        }, state.intervalMs);
        sock.on('close', () => clearInterval(timer));
        return false;
      }
      case 'big_events': {
        sock.write(sseHead);
        const pad = 'x'.repeat(state.eventBytes);
        let i = 0;
        const pump = () => {
          while (i < state.events) {
            i++;
            if (!sock.write(chunked(chunk(model, pad)))) return sock.once('drain', pump);
          }
          sock.write(chunked(chunk(model, null, 'stop')) + chunked('data: [DONE]\n\n') + `0${CRLF}${CRLF}`);
        };
        pump();
        return true;
      }
      case 'bad_chunk':
        sock.write(sseHead + chunked(chunk(model, 'one ')) + `zz${CRLF}garbage${CRLF}`);
        return false;
      case 'reset':
        sock.write(sseHead + chunked(chunk(model, 'one ')) + chunked(chunk(model, 'two ')));
        setTimeout(() => sock.resetAndDestroy(), 50);
        return false;
      case 'short_body': {
        const body = completion(model, marker);
        sock.end(head(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) + 100 }) + body);
        return false;
      }
      case 'redirect':
        sock.write(head(302, { location: 'http://169.254.169.254/latest/meta-data/', 'content-length': 0 }));
        return true;
      case 'hang':
        return false;
      case 'error_text': {
        const body = 'Traceback (most recent call last): internal-host-10.0.0.7 password=hunter2 ' + 'z'.repeat(600);
        sock.write(head(500, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(body) }) + body);
        return true;
      }
      case 'split_end': {
        const type = stream ? 'text/event-stream' : 'application/json';
        sock.setNoDelay(true);
        const pieces = [head(200, { 'content-type': type, 'transfer-encoding': 'chunked' }) + `0${CRLF}`, '\r', '\n'];
        const next = () => {
          if (sock.destroyed || pieces.length === 0) return;
          sock.write(pieces.shift());
          setTimeout(next, state.delayMs);
        };
        next();
        return true;
      }
      default:
        throw new Error(`unknown hostile mode ${m}`);
    }
  }

  const server = net.createServer((sock) => {
    state.connections++;
    state.sockets.add(sock);
    sock.on('close', () => state.sockets.delete(sock));
    sock.on('error', () => {});
    let buf = Buffer.alloc(0);
    let open = true; // keep-alive: the next request may follow
    sock.on('data', (d) => {
      if (!open) return;
      buf = Buffer.concat([buf, d]);
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const headText = buf.subarray(0, end).toString('latin1');
        const lines = headText.split('\r\n');
        const [method, url] = lines[0].split(' ');
        const headers = {};
        for (const l of lines.slice(1)) {
          const c = l.indexOf(':');
          if (c > 0) headers[l.slice(0, c).trim().toLowerCase()] = l.slice(c + 1).trim();
        }
        const len = Number(headers['content-length'] ?? 0);
        if (buf.length < end + 4 + len) return;
        const raw = buf.subarray(end + 4, end + 4 + len).toString('utf8');
        buf = buf.subarray(end + 4 + len);
        let json;
        try {
          json = JSON.parse(raw);
        } catch {
          json = undefined;
        }
        open = answer(sock, { method, url, headers, json });
        if (!open) return;
      }
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    state,
    setMode(m, opts = {}) {
      state.mode = m;
      Object.assign(state, opts);
    },
    close: () =>
      new Promise((r) => {
        for (const s of state.sockets) s.destroy();
        server.close(() => r());
      }),
  };
}
