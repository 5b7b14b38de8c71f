// The official `openai` npm client against the real server: Chat Completions and Responses, streaming
// and not, thinking on and off, plus the legacy Completions route through raw fetch.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openaiServerForFile, MODEL, npm } from './harness.mjs';

const OpenAI = npm('openai');

const file = openaiServerForFile();

function checkChatUsage(usage, maxTokens) {
  assert.ok(usage, 'usage is present');
  assert.ok(usage.prompt_tokens > 0);
  assert.ok(usage.completion_tokens > 0 && usage.completion_tokens <= maxTokens, `completion_tokens ${usage.completion_tokens}`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.equal(typeof usage.prompt_tokens_details.cached_tokens, 'number');
  assert.equal(usage.prompt_cache_hit_tokens + usage.prompt_cache_miss_tokens, usage.prompt_tokens);
}

test('chat completion, not streamed, thinking off', async () => {
  const r = await file.client.chat.completions.create({
    model: MODEL, max_tokens: 12, temperature: 0,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Say hello.' }],
    thinking: { type: 'disabled' },
  });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.equal(c.message.reasoning_content, undefined, 'no reasoning without thinking');
  assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
  checkChatUsage(r.usage, 12);
  if (c.finish_reason === 'length') assert.equal(r.usage.completion_tokens, 12);
});

test('chat completion, not streamed, thinking on (default)', async () => {
  const r = await file.client.chat.completions.create({
    model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: 'Think, then answer.' }], seed: 7,
  });
  const m = r.choices[0].message;
  assert.equal(typeof m.content, 'string');
  assert.equal(typeof m.reasoning_content, 'string', 'thinking mode reports reasoning_content');
  checkChatUsage(r.usage, 10);
});

test('chat completion, streamed, with usage', async () => {
  const stream = await file.client.chat.completions.create({
    model: MODEL, max_tokens: 16, stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'Count to five.' }], thinking: { type: 'disabled' },
  });
  let chunks = 0;
  let finish = null;
  let usage = null;
  let text = '';
  let role = null;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.model, MODEL);
    const d = chunk.choices[0]?.delta ?? {};
    if (d.role) role = d.role;
    if (typeof d.content === 'string') text += d.content;
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    if (chunk.usage) usage = chunk.usage;
    else assert.equal(chunk.usage, null, 'include_usage: usage is null before the end');
  }
  assert.equal(role, 'assistant');
  assert.ok(chunks >= 2);
  assert.ok(['stop', 'length'].includes(finish), `finish ${finish}`);
  checkChatUsage(usage, 16);
  assert.equal(typeof text, 'string');
});

test('chat completion, streamed, the same seed gives the same text', async () => {
  const run = async () => {
    const s = await file.client.chat.completions.create({
      model: MODEL, max_tokens: 8, stream: true, seed: 1234, temperature: 1,
      messages: [{ role: 'user', content: 'Pick a word.' }], thinking: { type: 'disabled' },
    });
    let t = '';
    for await (const c of s) t += c.choices[0]?.delta?.content ?? '';
    return t;
  };
  assert.equal(await run(), await run());
});

test('chat completion with tools parses in the client', async () => {
  const r = await file.client.chat.completions.create({
    model: MODEL, max_tokens: 8, thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
  });
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  checkChatUsage(r.usage, 8);
});

test('responses, not streamed', async () => {
  const r = await file.client.responses.create({ model: MODEL, input: 'Say hi.', max_output_tokens: 10, reasoning: { effort: 'none' } });
  assert.equal(r.object, 'response');
  assert.ok(['completed', 'incomplete'].includes(r.status), r.status);
  if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.ok(Array.isArray(r.output));
  assert.equal(typeof r.output_text, 'string', 'the SDK derives output_text');
  assert.ok(r.usage.input_tokens > 0);
  assert.ok(r.usage.output_tokens > 0 && r.usage.output_tokens <= 10);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
});

test('responses, streamed, thinking on', async () => {
  const stream = await file.client.responses.create({ model: MODEL, input: [{ role: 'user', content: 'Explain.' }], max_output_tokens: 12, stream: true });
  const types = [];
  let seq = -1;
  let final = null;
  for await (const ev of stream) {
    types.push(ev.type);
    assert.equal(ev.sequence_number, seq + 1, 'sequence numbers count up from 0');
    seq = ev.sequence_number;
    if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
  }
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)), types.at(-1));
  assert.ok(final.usage.input_tokens > 0);
  assert.ok(final.usage.output_tokens > 0);
});

test('responses stream helper reaches a final response', async () => {
  const stream = file.client.responses.stream({ model: MODEL, input: 'Hi', max_output_tokens: 6, reasoning: { effort: 'none' } });
  const final = await stream.finalResponse();
  assert.ok(['completed', 'incomplete'].includes(final.status));
  assert.ok(final.usage.output_tokens > 0);
});

test('legacy completions: text prompt, token-id prompt, streamed', async () => {
  const post = (body) => fetch(`${file.server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  let r = await post({ model: MODEL, prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
  assert.equal(r.status, 200);
  let j = await r.json();
  assert.equal(j.object, 'text_completion');
  assert.equal(typeof j.choices[0].text, 'string');
  assert.equal(j.usage.completion_tokens, j.choices[0].finish_reason === 'length' ? 5 : j.usage.completion_tokens);
  assert.ok(j.usage.prompt_tokens > 0);

  r = await post({ model: MODEL, prompt: [0, 19923, 14, 2058], max_tokens: 4, ignore_eos: true });
  j = await r.json();
  assert.equal(r.status, 200, JSON.stringify(j));
  assert.equal(j.usage.prompt_tokens, 4);
  assert.equal(j.usage.completion_tokens, 4, 'ignore_eos runs to max_tokens');
  assert.equal(j.choices[0].finish_reason, 'length');

  const c = await file.client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 6, stream: true, stream_options: { include_usage: true }, ignore_eos: true });
  let usage = null;
  let finish = null;
  for await (const chunk of c) {
    if (chunk.usage) usage = chunk.usage;
    if (chunk.choices?.[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 6);
});

test('models list and retrieve', async () => {
  const list = await file.client.models.list();
  const ids = [];
  for await (const m of list) ids.push(m.id);
  assert.deepEqual(ids, [MODEL]);
  const m = await file.client.models.retrieve(MODEL);
  assert.equal(m.id, MODEL);
  await assert.rejects(file.client.models.retrieve('nope'), (e) => e.status === 404);
});

test('unknown model is a 404 in OpenAI shape', async () => {
  await assert.rejects(
    file.client.chat.completions.create({ model: 'gpt-nothing', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 404 && e.error?.code === 'model_not_found' && typeof e.error?.message === 'string');
});

test('a bad request is a 400 BadRequestError with the recipe message', async () => {
  await assert.rejects(
    file.client.chat.completions.create({ model: MODEL, messages: [] }),
    (e) => e instanceof OpenAI.BadRequestError && /Empty input messages/.test(e.message) && e.error?.type === 'invalid_request_error');
  await assert.rejects(
    file.client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], temperature: 7 }),
    (e) => e.status === 400 && /temperature/.test(e.message));
});

test('a repeated long prompt reports prefix-cache hits in usage and /metrics', async () => {
  const req = {
    model: MODEL, max_tokens: 2, thinking: { type: 'disabled' },
    messages: [{ role: 'system', content: 'You are a helpful assistant. '.repeat(60) }, { role: 'user', content: 'hi' }],
  };
  const first = await file.client.chat.completions.create(req);
  const second = await file.client.chat.completions.create(req);
  assert.ok(first.usage.prompt_tokens > 256, `prompt ${first.usage.prompt_tokens}`);
  assert.equal(second.usage.prompt_tokens, first.usage.prompt_tokens);
  assert.ok(second.usage.prompt_tokens_details.cached_tokens > 0, 'the second request hits the prefix cache');
  assert.equal(second.usage.prompt_cache_hit_tokens, second.usage.prompt_tokens_details.cached_tokens);
  const r = await fetch(`${file.server.url}/metrics`);
  const text = await r.text();
  const hits = [...text.matchAll(/^dsinfer_prompt_cache_hit_tokens_total\{route="\/v1\/chat\/completions"\} (\d+)/gm)];
  assert.ok(hits.length === 1 && Number(hits[0][1]) >= second.usage.prompt_cache_hit_tokens);
});
