// Server lifecycle and limits: the concurrency limit (429 + Retry-After, in both SDKs), graceful shutdown
// (in-flight streams finish, or end with a proper error event when the drain time is over; exit code 0),
// and the embedded default model of a bare `dsinfer serve`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { startServer, MODEL, npm, env, waitFor, metrics, serverEnv, rawExchange, statusOf } from './harness.mjs';

const OpenAI = npm('openai');
const Anthropic = npm('@anthropic-ai/sdk');

const longChat = { model: MODEL, max_tokens: 5000, ignore_eos: true, stream: true, thinking: { type: 'disabled' },
                   messages: [{ role: 'user', content: 'Go.' }] };

async function readSse(response, onChunk) {
  const reader = response.body.getReader();
  const dec = new TextDecoder();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += dec.decode(value, { stream: true });
    if (onChunk) onChunk(text);
  }
  return text;
}

test('the concurrency limit answers 429 with Retry-After in both protocols', async () => {
  const server = await startServer(['--max-concurrent-requests', '1', '--retry-after', '3']);
  try {
    const controller = new AbortController();
    const first = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', signal: controller.signal, headers: { 'content-type': 'application/json' }, body: JSON.stringify(longChat) });
    assert.equal(first.status, 200);
    const reading = readSse(first).catch(() => {});

    const r = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }) });
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('retry-after'), '3');
    const j = await r.json();
    assert.equal(j.error.code, 'rate_limit_exceeded');

    const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'x', maxRetries: 0 });
    await assert.rejects(openai.chat.completions.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }),
      (e) => e instanceof OpenAI.RateLimitError);
    const anthropic = new Anthropic({ baseURL: server.url, apiKey: 'x', maxRetries: 0 });
    await assert.rejects(anthropic.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }),
      (e) => e instanceof Anthropic.RateLimitError && e.error?.error?.type === 'rate_limit_error');

    const m = await metrics(server);
    assert.ok(m.get('dsinfer_requests_rejected_total', { reason: 'concurrency_limit' }) >= 3);
    controller.abort();
    await reading;
    // The slot is free again.
    await waitFor(async () => (await metrics(server)).get('dsinfer_requests_in_flight') === 0, { what: 'slot released' });
    const ok = await openai.chat.completions.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] });
    assert.ok(ok.usage.completion_tokens > 0);
  } finally {
    const { code } = await server.stop();
    assert.equal(code, 0, server.stderr());
  }
});

test('SIGTERM lets a short in-flight stream finish, then the server exits 0', async () => {
  const server = await startServer(['--shutdown-timeout', '60']);
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...longChat, max_tokens: 40, stream_options: { include_usage: true } }) });
  assert.equal(r.status, 200);
  let signalled = false;
  const text = await readSse(r, (t) => {
    if (!signalled && t.includes('"content"')) { signalled = true; server.proc.kill('SIGTERM'); }
  });
  assert.ok(signalled);
  assert.ok(text.endsWith('data: [DONE]\n\n'), 'the stream ended normally');
  const lines = text.split('\n\n').filter((l) => l.startsWith('data: {'));
  const last = JSON.parse(lines.at(-1).slice(6));  // OpenAI's usage chunk, after the finish chunk
  assert.equal(JSON.parse(lines.at(-2).slice(6)).choices[0].finish_reason, 'length');
  assert.equal(last.usage.completion_tokens, 40);
  const { code } = await server.exited;
  assert.equal(code, 0, server.stderr());
  await assert.rejects(fetch(`${server.url}/health`), 'no longer listening');
});

// During a drain the server closes idle keep-alive connections; a request the client had just sent on
// one of them fails with a socket error before any byte of an answer: retry it on a new connection, as
// any HTTP client must.
async function fetchRetryingClosedSockets(url, init) {
  for (let attempt = 0; ; ++attempt) {
    try {
      return await fetch(url, init);
    } catch (e) {
      if (attempt >= 5 || e?.cause?.code !== 'UND_ERR_SOCKET') throw e;
    }
  }
}

test('while draining, the listener still answers: /health is 503 and new generations are refused', async () => {
  const server = await startServer(['--shutdown-timeout', '60']);
  const controller = new AbortController();
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', signal: controller.signal, headers: { 'content-type': 'application/json' }, body: JSON.stringify(longChat) });
  assert.equal(r.status, 200);
  const reading = readSse(r).catch(() => {});
  await waitFor(async () => (await metrics(server)).get('dsinfer_engine_running_requests') === 1, { what: 'running' });
  server.proc.kill('SIGTERM');
  // The stream keeps the drain open; the health check sees it from a new connection.
  const health = await waitFor(async () => {
    const h = await fetchRetryingClosedSockets(`${server.url}/health`);
    return h.status === 503 ? h : null;
  }, { what: '/health 503' });
  assert.deepEqual(await health.json(), { status: 'draining' });
  assert.equal(health.headers.get('connection'), 'close');
  const late = await fetchRetryingClosedSockets(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }) });
  assert.equal(late.status, 503);
  controller.abort();
  await reading;
  const { code } = await server.exited;
  assert.equal(code, 0, server.stderr());
  await assert.rejects(fetch(`${server.url}/health`), 'no longer listening');
});

test('SIGTERM past the drain time ends long streams with an error event, exit code 0', async () => {
  const server = await startServer(['--shutdown-timeout', '1']);
  const chat = fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(longChat) });
  const messages = fetch(`${server.url}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, max_tokens: 5000, ignore_eos: true, stream: true, messages: [{ role: 'user', content: 'Go.' }] }) });
  const [a, b] = await Promise.all([chat, messages]);
  const texts = Promise.all([readSse(a), readSse(b)]);
  await waitFor(async () => (await metrics(server)).get('dsinfer_engine_running_requests') === 2, { what: 'both running' });
  server.proc.kill('SIGTERM');
  const [chatText, msgText] = await texts;
  assert.match(chatText, /data: \{"error":\{"message":"[^"]*shutting down/);
  assert.ok(chatText.endsWith('data: [DONE]\n\n'));
  assert.match(msgText, /event: error\ndata: \{"type":"error","error":\{"type":"overloaded_error"/);
  const { code } = await server.exited;
  assert.equal(code, 0, server.stderr());
});

test('a signal while the model is being prepared stops the process at once', async () => {
  const home = `${env('DSINFER_HOME')}-signal-${process.pid}`;
  const proc = spawn(env('DSINFER_BIN'), ['serve', '--port', '0'], { env: serverEnv({ DSINFER_HOME: home }), stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  let sent = false;
  proc.stderr.on('data', (d) => { err += d; });
  proc.stdout.on('data', (d) => {
    out += d;
    // Printed before the tiny model is generated and loaded (seconds): the signal arrives meanwhile.
    if (!sent && /using the embedded tiny model/.test(out)) { sent = true; proc.kill('SIGINT'); }
  });
  const { code } = await new Promise((resolve) => proc.on('exit', (c, s) => resolve({ code: c, signal: s })));
  fs.rmSync(home, { recursive: true, force: true });
  assert.ok(sent, out);
  assert.doesNotMatch(out, /\bready\b/, 'it used to load, serve, and only then see the signal');
  assert.equal(code, 130, err);
  assert.match(err, /SIGINT before the server was ready/);
});

test('a bare `dsinfer serve` generates the embedded tiny model once and serves it', async () => {
  const home = `${env('DSINFER_HOME')}-${process.pid}`;
  const run = () => new Promise((resolve, reject) => {
    const proc = spawn(env('DSINFER_BIN'), ['serve', '--port', '0'], { env: serverEnv({ DSINFER_HOME: home }), stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    proc.stderr.on('data', (d) => { err += d; });
    proc.stdout.on('data', async (d) => {
      out += d;
      if (/\bready\b/.test(out) && !proc.checked) {
        proc.checked = true;
        try {
          const url = out.match(/listening on (http:\/\/[0-9.:]+)/)[1];
          const models = await (await fetch(`${url}/v1/models`)).json();
          const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
          const r = await openai.chat.completions.create({ model: 'dsinfer-tiny', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] });
          proc.kill('SIGINT');
          proc.on('exit', (code) => resolve({ out, err, code, models, usage: r.usage }));
        } catch (e) { proc.kill('SIGKILL'); reject(e); }
      }
    });
    proc.on('error', reject);
  });
  const first = await run();
  assert.equal(first.code, 0, first.err);
  assert.match(first.out, /generated the tiny model/);
  assert.deepEqual(first.models.data.map((m) => m.id), ['dsinfer-tiny']);
  assert.ok(first.usage.completion_tokens > 0);
  const second = await run();
  assert.equal(second.code, 0, second.err);
  assert.doesNotMatch(second.out, /generated the tiny model/, 'the cached model is reused');
  fs.rmSync(home, { recursive: true, force: true });
});

// An open-file limit below --max-connections: the server says so at start and serves at most what fits;
// a client over that cap gets a 503 at once (before the fix every new client, /health included, hung
// unanswered once accept() failed with EMFILE), and once connections close it serves again.
test('an fd limit below --max-connections lowers the cap with a warning; clients over it get 503', async () => {
  const server = await startServer(['--max-connections', '5000'], { launcher: ['prlimit', '--nofile=160:160', '--'] });
  await waitFor(async () => /serving at most \d+/.test(server.stderr()), { what: 'the warning' });
  const m = server.stderr().match(/serving at most (\d+)/);
  const cap = Number(m[1]);
  assert.ok(cap > 0 && cap < 160, `cap ${cap}`);
  const sockets = [];
  try {
    for (let i = 0; i < cap; i++) {
      sockets.push(await new Promise((resolve, reject) => {
        const s = net.connect(server.port, '127.0.0.1', () => resolve(s));
        s.on('error', reject);
      }));
    }
    await waitFor(async () => {
      const { data } = await rawExchange(server.port, ['GET /health HTTP/1.1\r\nHost: x\r\n\r\n'], { timeoutMs: 5000 });
      return statusOf(data) === 503 && /too many open connections/.test(data);
    }, { what: '503 over the cap' });
  } finally {
    for (const s of sockets) s.destroy();
  }
  await waitFor(async () => (await fetch(`${server.url}/health`)).status === 200, { what: 'served again' });
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr());
});
