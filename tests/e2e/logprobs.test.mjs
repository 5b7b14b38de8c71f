// Logprobs against the real server with the official client: the Chat and legacy Completions shapes
// (non-streaming and streamed), sanity of the numbers (probabilities at most 1 and summing to at most 1, the greedy
// choice is the best alternative) and the range check.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openaiServerForFile, MODEL } from './harness.mjs';


const file = openaiServerForFile();

const completion = (extra) => ({
  model: MODEL, prompt: 'Once upon a time', temperature: 0, max_tokens: 6, ignore_eos: true, ...extra,
});

function checkTokenLogprobs(lp, k, n) {
  assert.equal(lp.tokens.length, n);
  assert.equal(lp.token_logprobs.length, n);
  assert.equal(lp.top_logprobs.length, n);
  assert.equal(lp.text_offset.length, n);
  for (let i = 0; i < n; ++i) {
    const chosen = lp.token_logprobs[i];
    assert.ok(Number.isFinite(chosen) && chosen <= 0, `token ${i}: logprob ${chosen}`);
    const top = Object.entries(lp.top_logprobs[i]);
    assert.ok(top.length <= k && top.length >= Math.min(k, 1), `token ${i}: ${top.length} alternatives`);
    const mass = top.reduce((s, [, v]) => s + Math.exp(v), 0);
    assert.ok(mass <= 1 + 1e-4, `token ${i}: alternatives' probabilities sum to ${mass}`);
    // Greedy: the chosen token is the most likely one, so its logprob is the best alternative's.
    if (k > 0) assert.ok(Math.abs(Math.max(...top.map(([, v]) => v)) - chosen) < 1e-5, `token ${i}`);
    if (i > 0) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
  }
}

test('completions: logprobs k gives tokens, token_logprobs, top_logprobs and text_offset', async () => {
  const r = await file.client.completions.create(completion({ logprobs: 3 }));
  assert.equal(r.usage.completion_tokens, 6);
  checkTokenLogprobs(r.choices[0].logprobs, 3, 6);
  assert.equal(r.choices[0].logprobs.text_offset[0], 0);
  const tokens = r.choices[0].logprobs.tokens;
  if (!tokens.some((t) => t.startsWith('bytes:'))) assert.equal(tokens.join(''), r.choices[0].text);
});

test('completions: logprobs 0 gives the chosen tokens only; none when not asked for', async () => {
  const r = await file.client.completions.create(completion({ logprobs: 0 }));
  checkTokenLogprobs(r.choices[0].logprobs, 0, 6);
  for (const top of r.choices[0].logprobs.top_logprobs) assert.deepEqual(top, {});
  const off = await file.client.completions.create(completion({}));
  assert.equal(off.choices[0].logprobs, null);
});

test('completions: streamed logprobs match the non-streamed ones', async () => {
  const whole = await file.client.completions.create(completion({ logprobs: 2 }));
  const stream = await file.client.completions.create(completion({ logprobs: 2, stream: true }));
  const merged = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const chunk of stream) {
    const lp = chunk.choices[0]?.logprobs;
    if (!lp) continue;
    for (const key of Object.keys(merged)) merged[key].push(...lp[key]);
  }
  assert.deepEqual(merged, whole.choices[0].logprobs);
});

test('completions: logprobs outside 0..5 is a 400', async () => {
  await assert.rejects(file.client.completions.create(completion({ logprobs: 6 })),
    (e) => e.status === 400 && /logprobs/.test(e.message));
});

const chat = (extra) => ({
  model: MODEL, temperature: 0, thinking: { type: 'disabled' }, ignore_eos: true, max_completion_tokens: 6,
  messages: [{ role: 'user', content: 'Count to ten.' }], ...extra,
});

function checkChatLogprobs(content, k, n) {
  assert.equal(content.length, n);
  for (const [i, entry] of content.entries()) {
    assert.equal(typeof entry.token, 'string');
    assert.ok(Array.isArray(entry.bytes) && entry.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
    assert.ok(Number.isFinite(entry.logprob) && entry.logprob <= 0, `token ${i}: ${entry.logprob}`);
    assert.equal(entry.top_logprobs.length, k, `token ${i}`);
    const mass = entry.top_logprobs.reduce((s, t) => s + Math.exp(t.logprob), 0);
    assert.ok(mass <= 1 + 1e-4, `token ${i}: alternatives sum to ${mass}`);
    for (let j = 1; j < k; ++j) assert.ok(entry.top_logprobs[j].logprob <= entry.top_logprobs[j - 1].logprob);
    // Greedy: the chosen token is the first alternative.
    if (k > 0) {
      assert.equal(entry.top_logprobs[0].token, entry.token, `token ${i}`);
      assert.ok(Math.abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-6, `token ${i}`);
    }
  }
}

test('chat: logprobs with top_logprobs, in OpenAI\'s shape', async () => {
  const r = await file.client.chat.completions.create(chat({ logprobs: true, top_logprobs: 4 }));
  assert.equal(r.usage.completion_tokens, 6);
  checkChatLogprobs(r.choices[0].logprobs.content, 4, 6);
  const bare = await file.client.chat.completions.create(chat({ logprobs: true }));
  checkChatLogprobs(bare.choices[0].logprobs.content, 0, 6);
  assert.deepEqual(bare.choices[0].logprobs.content.map((e) => e.logprob),
    r.choices[0].logprobs.content.map((e) => e.logprob));
});

test('chat: streamed logprobs add up to the non-streamed ones', async () => {
  const whole = await file.client.chat.completions.create(chat({ logprobs: true, top_logprobs: 2 }));
  const stream = await file.client.chat.completions.create(chat({ logprobs: true, top_logprobs: 2, stream: true }));
  const merged = [];
  for await (const chunk of stream) merged.push(...(chunk.choices[0]?.logprobs?.content ?? []));
  assert.deepEqual(merged, whole.choices[0].logprobs.content);
});

test('chat: top_logprobs is validated and needs logprobs', async () => {
  await assert.rejects(file.client.chat.completions.create(chat({ logprobs: true, top_logprobs: 21 })),
    (e) => e.status === 400 && e.param === 'top_logprobs');
  await assert.rejects(file.client.chat.completions.create(chat({ top_logprobs: 3 })),
    (e) => e.status === 400 && e.param === 'top_logprobs');
  const off = await file.client.chat.completions.create(chat({ logprobs: false }));
  assert.equal(off.choices[0].logprobs, null);
});

// The Responses API asks for logprobs with top_logprobs or include: ['message.output_text.logprobs'];
// this server computes none there, so both are refused rather than ignored. Other include values are
// accepted (stateless clients send reasoning.encrypted_content).
test('responses: logprobs requests are refused with 400, other include values accepted', async () => {
  const ask = (extra) => file.client.responses.create({ model: MODEL, input: 'Hi.', max_output_tokens: 4, ...extra });
  await assert.rejects(ask({ top_logprobs: 2 }),
    (e) => e.status === 400 && e.code === 'unsupported_parameter' && e.param === 'top_logprobs');
  await assert.rejects(ask({ include: ['reasoning.encrypted_content', 'message.output_text.logprobs'] }),
    (e) => e.status === 400 && e.code === 'unsupported_parameter' && e.param === 'include');
  const r = await ask({ include: ['reasoning.encrypted_content'] });
  assert.equal(r.object, 'response');
});
