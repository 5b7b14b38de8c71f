// Cancellation: a client that aborts a stream (or a non-streamed request) mid-way cancels its engine
// request at once; /metrics shows the cancellation, nothing left running and the KV memory back where
// it was (the prefix cache is off here so that no finished blocks stay cached).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL, npm, metrics, waitFor } from './harness.mjs';

const OpenAI = npm('openai');
const Anthropic = npm('@anthropic-ai/sdk');

let server;
let openai;
let anthropic;
before(async () => {
  server = await startServer(['--no-prefix-cache']);
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 120000 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'x', maxRetries: 0, timeout: 120000 });
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr());
});

async function idleState() {
  const m = await metrics(server);
  return {
    inFlight: m.get('dsinfer_requests_in_flight'),
    running: m.get('dsinfer_engine_running_requests'),
    waiting: m.get('dsinfer_engine_waiting_requests'),
    kv: m.get('dsinfer_engine_kv_used_bytes'),
    cancelled: m.get('dsinfer_requests_cancelled_total', { why: 'client_disconnect' }),
    finishedCancelled: m.get('dsinfer_requests_finished_total', { reason: 'cancelled' }),
  };
}

async function expectCancelled(before, what) {
  const after = await waitFor(async () => {
    const s = await idleState();
    return s.cancelled === before.cancelled + 1 && s.inFlight === 0 && s.running === 0 && s.waiting === 0 ? s : null;
  }, { what: `${what}: cancellation visible in /metrics` });
  assert.equal(after.finishedCancelled, before.finishedCancelled + 1);
  assert.equal(after.kv, before.kv, 'KV memory is back to what it was before the request');
}

test('aborting an OpenAI chat stream cancels the request and frees its KV', async () => {
  const before = await idleState();
  assert.equal(before.running, 0);
  const stream = await openai.chat.completions.create({
    model: MODEL, max_tokens: 5000, stream: true, ignore_eos: true, thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'Write forever.' }],
  });
  let chunks = 0;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content !== undefined) chunks++;
    if (chunks >= 3) break;  // leaving the loop aborts the HTTP request
  }
  assert.ok(chunks >= 3);
  await expectCancelled(before, 'openai chat');
});

test('aborting a Responses stream through its AbortController', async () => {
  const before = await idleState();
  const controller = new AbortController();
  const stream = await openai.responses.create(
    { model: MODEL, input: 'Go on and on.', max_output_tokens: 5000, stream: true, ignore_eos: true, reasoning: { effort: 'none' } },
    { signal: controller.signal });
  let deltas = 0;
  let completed = false;
  try {
    for await (const ev of stream) {
      if (ev.type === 'response.output_text.delta' && ++deltas === 2) controller.abort();
      if (ev.type === 'response.completed' || ev.type === 'response.incomplete') completed = true;
    }
  } catch (e) {
    // The SDK ends the iteration quietly on abort, or throws its abort error: both are fine.
    assert.ok(e.name === 'AbortError' || e instanceof OpenAI.APIUserAbortError, String(e));
  }
  assert.equal(deltas, 2);
  assert.equal(completed, false, 'the stream did not run to its end');
  await expectCancelled(before, 'responses');
});

test('aborting an Anthropic message stream', async () => {
  const before = await idleState();
  const stream = anthropic.messages.stream({
    model: MODEL, max_tokens: 5000, ignore_eos: true, thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'Keep talking.' }],
  });
  let texts = 0;
  stream.on('text', () => { if (++texts === 2) stream.abort(); });
  await assert.rejects(stream.finalMessage(), (e) => e instanceof Anthropic.APIUserAbortError || e.name === 'AbortError');
  assert.ok(texts >= 2);
  await expectCancelled(before, 'anthropic');
});

test('a client that leaves a non-streamed request cancels it', async () => {
  const before = await idleState();
  const controller = new AbortController();
  const pending = fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', signal: controller.signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, max_tokens: 5000, ignore_eos: true, messages: [{ role: 'user', content: 'x' }] }),
  });
  const running = await waitFor(async () => { const st = await idleState(); return st.running === 1 ? st : null; },
    { what: 'the request running' });
  assert.ok(running.kv > before.kv, 'the running request holds KV memory');
  controller.abort();
  await assert.rejects(pending, (e) => e.name === 'AbortError');
  await expectCancelled(before, 'non-streamed');
});

test('after cancellations the server still answers normally', async () => {
  const r = await openai.chat.completions.create({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] });
  assert.ok(r.usage.completion_tokens > 0);
});
