// Special tokens never reach a client's text by default (skip_special_tokens, as vLLM): the model is made
// to emit nothing but EOS (logit_bias +100 with ignore_eos), so without skipping the text would be EOS
// spellings.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL, npm } from './harness.mjs';

const OpenAI = npm('openai');
const EOS = '<｜end▁of▁sentence｜>';

let server;
let client;
before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, `server exit code\n${server.stderr()}`);
});

const onlyEos = { temperature: 0, ignore_eos: true, logit_bias: { 1: 100 } };

test('completions: EOS spellings are skipped by default, kept with skip_special_tokens: false', async () => {
  const base = { model: MODEL, prompt: 'Hello', max_tokens: 3, ...onlyEos };
  const skipped = await client.completions.create(base);
  assert.equal(skipped.usage.completion_tokens, 3);
  assert.equal(skipped.choices[0].text, '');
  const kept = await client.completions.create({ ...base, skip_special_tokens: false });
  assert.equal(kept.choices[0].text, EOS.repeat(3));
});

test('chat: EOS spellings are skipped by default, streamed or not', async () => {
  const base = { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], thinking: { type: 'disabled' },
    max_completion_tokens: 3, ...onlyEos };
  const r = await client.chat.completions.create(base);
  assert.equal(r.usage.completion_tokens, 3);
  assert.ok(!(r.choices[0].message.content ?? '').includes(EOS), r.choices[0].message.content);
  const stream = await client.chat.completions.create({ ...base, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, '');
  const kept = await client.chat.completions.create({ ...base, skip_special_tokens: false });
  assert.equal(kept.choices[0].message.content, EOS.repeat(3));
});
