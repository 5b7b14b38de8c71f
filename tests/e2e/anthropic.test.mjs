// The official `@anthropic-ai/sdk` npm client against the real server: Messages, streaming and not.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL, npm } from './harness.mjs';

const Anthropic = npm('@anthropic-ai/sdk');

let server;
let client;
before(async () => {
  server = await startServer(['--api-key', 'sk-test-key']);
  client = new Anthropic({ baseURL: server.url, apiKey: 'sk-test-key', maxRetries: 0, timeout: 120000 });
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, `server exit code\n${server.stderr()}`);
});

function checkUsage(usage, maxTokens) {
  assert.ok(usage.input_tokens > 0, 'input_tokens');
  assert.ok(usage.output_tokens > 0 && usage.output_tokens <= maxTokens, `output_tokens ${usage.output_tokens}`);
  assert.equal(typeof usage.cache_read_input_tokens, 'number');
}

test('message, not streamed, thinking off', async () => {
  const m = await client.messages.create({
    model: MODEL, max_tokens: 12, system: 'Be brief.', messages: [{ role: 'user', content: 'Say hello.' }],
    thinking: { type: 'disabled' },
  });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.model, MODEL);
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
  assert.ok(m.content.every((b) => b.type === 'text'), JSON.stringify(m.content));
  checkUsage(m.usage, 12);
});

test('message, not streamed, thinking on', async () => {
  const m = await client.messages.create({
    model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: [{ type: 'text', text: 'Think first.' }] }],
    thinking: { type: 'enabled', budget_tokens: 1024 },
  });
  assert.equal(m.content[0].type, 'thinking');
  assert.equal(typeof m.content[0].thinking, 'string');
  checkUsage(m.usage, 10);
});

test('message, streamed through the stream helper', async () => {
  const stream = client.messages.stream({
    model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'Count.' }], thinking: { type: 'disabled' },
  });
  let text = '';
  stream.on('text', (t) => { text += t; });
  const final = await stream.finalMessage();
  assert.ok(['end_turn', 'max_tokens'].includes(final.stop_reason));
  checkUsage(final.usage, 16);
  const joined = final.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  assert.equal(joined, text);
});

test('message, streamed raw events in order', async () => {
  const stream = await client.messages.create({
    model: MODEL, max_tokens: 8, stream: true, messages: [{ role: 'user', content: 'Go.' }],
  });
  const types = [];
  let usage = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'message_delta') usage = ev.usage;
  }
  assert.equal(types[0], 'message_start');
  assert.equal(types[1], 'content_block_start', 'thinking mode opens a thinking block at once');
  assert.ok(!types.includes('ping'), 'the SDK drops ping events');
  assert.equal(types.at(-2), 'message_delta');
  assert.equal(types.at(-1), 'message_stop');
  assert.ok(usage.output_tokens > 0);
});

test('message stream on the wire: ping after the first block start, named events, no [DONE]', async () => {
  const r = await fetch(`${server.url}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': 'sk-test-key', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: MODEL, max_tokens: 4, stream: true, messages: [{ role: 'user', content: 'Go.' }] }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  const text = await r.text();
  const events = [...text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1]);
  assert.deepEqual(events.slice(0, 3), ['message_start', 'content_block_start', 'ping']);
  assert.equal(events.filter((e) => e === 'ping').length, 1);
  assert.equal(events.at(-1), 'message_stop');
  assert.ok(!text.includes('[DONE]'));
  for (const frame of text.trim().split('\n\n')) {
    const [ev, data] = frame.split('\n');
    assert.equal(JSON.parse(data.slice(6)).type, ev.slice(7), 'data.type names the event');
  }
});

test('a wrong API key is a 401 AuthenticationError in Anthropic shape', async () => {
  const bad = new Anthropic({ baseURL: server.url, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(
    bad.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.AuthenticationError && e.error?.type === 'error' && e.error?.error?.type === 'authentication_error');
});

test('Bearer authentication works too, and a missing key is refused', async () => {
  const ok = await fetch(`${server.url}/v1/models`, { headers: { authorization: 'Bearer sk-test-key' } });
  assert.equal(ok.status, 200);
  const none = await fetch(`${server.url}/v1/models`);
  assert.equal(none.status, 401);
  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 200, '/health needs no key');
});

test('unknown model and invalid requests in Anthropic shape', async () => {
  await assert.rejects(
    client.messages.create({ model: 'claude-nothing', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.NotFoundError && e.error?.error?.type === 'not_found_error');
  await assert.rejects(
    client.messages.create({ model: MODEL, max_tokens: 0, messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.error?.error?.type === 'invalid_request_error');
});

test('models list in Anthropic shape', async () => {
  const page = await client.models.list();
  assert.deepEqual(page.data.map((m) => m.id), [MODEL]);
  assert.equal(page.data[0].type, 'model');
});

// Token counting: the prompt of the same request as /v1/messages counts it (usage.input_tokens there
// excludes what the prefix cache served, so the two are added).
test('messages.countTokens counts the prompt /v1/messages runs', async () => {
  const params = {
    model: MODEL, system: 'Be brief.', thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'How many tokens is this prompt?' }],
  };
  const counted = await client.messages.countTokens(params);
  assert.deepEqual(Object.keys(counted), ['input_tokens']);
  const m = await client.messages.create({ ...params, max_tokens: 1 });
  assert.equal(counted.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
  const longer = await client.messages.countTokens({ ...params, messages: [...params.messages,
    { role: 'assistant', content: 'Some.' }, { role: 'user', content: 'And now?' }] });
  assert.ok(longer.input_tokens > counted.input_tokens, `${longer.input_tokens} > ${counted.input_tokens}`);
  await assert.rejects(client.messages.countTokens({ model: MODEL, messages: [] }),
    (e) => e instanceof Anthropic.BadRequestError && e.error?.error?.type === 'invalid_request_error');
  await assert.rejects(client.messages.countTokens({ ...params, model: 'claude-nothing' }),
    (e) => e instanceof Anthropic.NotFoundError && e.error?.error?.type === 'not_found_error');
});

// The Anthropic SDK sends anthropic-version on every request: its 401s and 404s come in its shape on
// the shared routes too, and every /v1/messages path is Anthropic's.
test('401 and 404 in Anthropic shape on shared and unknown routes', async () => {
  const bad = new Anthropic({ baseURL: server.url, apiKey: 'wrong', maxRetries: 0 });
  for (const call of [() => bad.models.list(), () => bad.messages.countTokens({ model: MODEL, messages: [] })]) {
    await assert.rejects(call(),
      (e) => e instanceof Anthropic.AuthenticationError && e.error?.type === 'error' &&
        e.error?.error?.type === 'authentication_error');
  }
  await assert.rejects(client.models.retrieve('claude-nothing'),
    (e) => e instanceof Anthropic.NotFoundError && e.error?.type === 'error' && e.error?.error?.type === 'not_found_error');
  for (const headers of [{ 'x-api-key': 'sk-test-key' }, { 'x-api-key': 'sk-test-key', 'anthropic-version': '2023-06-01' }]) {
    const r = await fetch(`${server.url}/v1/messages/nothing`, { method: 'POST', headers, body: '{}' });
    assert.equal(r.status, 404);
    const body = await r.json();
    assert.equal(body.type, 'error', JSON.stringify(body));
    assert.equal(body.error.type, 'not_found_error');
  }
  // Without anthropic-version, a shared route keeps OpenAI's shape.
  const openai = await fetch(`${server.url}/v1/models`, { headers: { 'x-api-key': 'wrong' } });
  assert.equal(openai.status, 401);
  assert.equal((await openai.json()).error.type, 'authentication_error');
});
