// Request parameters of the OpenAI API that the official client sends and users rely on, checked against
// the real server: each is honoured (or refused with a 400), never accepted and ignored.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openaiServerForFile, MODEL } from './harness.mjs';


const file = openaiServerForFile();

const chat = (extra) => ({
  model: MODEL, temperature: 0, thinking: { type: 'disabled' }, ignore_eos: true,
  messages: [{ role: 'user', content: 'Count to one hundred.' }], ...extra,
});

test('max_completion_tokens limits the completion', async () => {
  const r = await file.client.chat.completions.create(chat({ max_completion_tokens: 3 }));
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 3);
});

test('max_completion_tokens wins over the deprecated max_tokens', async () => {
  const r = await file.client.chat.completions.create(chat({ max_tokens: 9, max_completion_tokens: 4 }));
  assert.equal(r.usage.completion_tokens, 4);
});

test('max_completion_tokens limits a streamed completion', async () => {
  const stream = await file.client.chat.completions.create(chat({ max_completion_tokens: 5, stream: true,
    stream_options: { include_usage: true } }));
  let usage;
  for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
  assert.ok(usage, 'usage chunk');
  assert.equal(usage.completion_tokens, 5);
});

test('max_completion_tokens is validated like max_tokens', async () => {
  await assert.rejects(file.client.chat.completions.create(chat({ max_completion_tokens: 0 })),
    (e) => e.status === 400 && /max_completion_tokens/.test(e.message));
});

// OpenAI's streaming usage: a last chunk of its own with "choices":[] when include_usage is set, and no
// usage anywhere when it is not.
test('streamed usage comes in a separate final chunk, only when asked for', async () => {
  for (const includeUsage of [true, false]) {
    const stream = await file.client.chat.completions.create(chat({ max_completion_tokens: 4, stream: true,
      ...(includeUsage ? { stream_options: { include_usage: true } } : {}) }));
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks[chunks.length - 1];
    const finish = chunks.findIndex((c) => c.choices[0]?.finish_reason);
    assert.ok(finish >= 0, 'a finish chunk');
    if (includeUsage) {
      assert.equal(finish, chunks.length - 2, 'the usage chunk follows the finish chunk');
      assert.deepEqual(last.choices, []);
      assert.equal(last.usage.completion_tokens, 4);
      assert.equal(chunks[finish].usage, null);
    } else {
      assert.equal(finish, chunks.length - 1);
      assert.ok(chunks.every((c) => c.usage === undefined), 'no usage without include_usage');
    }
  }
});

// logit_bias is honoured: a +100 bias makes one token the certain choice of every step.
test('logit_bias forces a token; penalties are accepted and validated', async () => {
  const forced = 1000;
  const r = await file.client.completions.create({ model: MODEL, prompt: [0, 19923, 14], max_tokens: 5, temperature: 0,
    ignore_eos: true, logit_bias: { [forced]: 100 } });
  const tokens = (await fetch(`${file.server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: [0, 19923, 14], max_tokens: 5, temperature: 0, ignore_eos: true,
      logit_bias: { [forced]: 100 } }) }).then((x) => x.json()));
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(tokens.choices[0].text, r.choices[0].text, 'deterministic');
  const plain = await file.client.completions.create({ model: MODEL, prompt: [0, 19923, 14], max_tokens: 5, temperature: 0,
    ignore_eos: true });
  assert.notEqual(plain.choices[0].text, r.choices[0].text, 'the bias changed the output');
  // The same text as the forced token repeated: decode it once through a one-token completion.
  const one = await file.client.completions.create({ model: MODEL, prompt: [0, 19923, 14], max_tokens: 1, temperature: 0,
    ignore_eos: true, logit_bias: { [forced]: 100 } });
  assert.equal(r.choices[0].text, one.choices[0].text.repeat(5));
  const p = await file.client.chat.completions.create(chat({ max_completion_tokens: 6, presence_penalty: 1.5,
    frequency_penalty: 1.0 }));
  assert.equal(p.usage.completion_tokens, 6);
  for (const bad of [{ presence_penalty: 3 }, { frequency_penalty: -2.5 }, { logit_bias: { abc: 1 } },
    { logit_bias: { 5: 101 } }, { logit_bias: { 99999999: 1 } }]) {
    await assert.rejects(file.client.chat.completions.create(chat({ max_completion_tokens: 2, ...bad })),
      (e) => e.status === 400, JSON.stringify(bad));
  }
});

// best_of below n is refused with a 400 naming the parameter (best_of itself: n_samples.test.mjs).
test('best_of below n is refused; store is accepted', async () => {
  const refused = [
    [() => file.client.completions.create({ model: MODEL, prompt: 'a', max_tokens: 2, n: 3, best_of: 2 }), 'best_of'],
  ];
  for (const [call, param] of refused) {
    await assert.rejects(call(), (e) => e.status === 400 && e.code === 'invalid_value' && e.param === param &&
      e.message.includes(param), param);
  }
  const off = await file.client.chat.completions.create(chat({ max_completion_tokens: 2, logprobs: false }));
  assert.equal(off.choices[0].logprobs, null);
  const one = await file.client.completions.create({ model: MODEL, prompt: 'a', max_tokens: 2, best_of: 1 });
  assert.equal(one.choices.length, 1);
  for (const store of [false, true]) {
    const r = await file.client.responses.create({ model: MODEL, input: 'Hi.', max_output_tokens: 16, store });
    assert.equal(r.status === 'completed' || r.status === 'incomplete', true, r.status);
  }
  await assert.rejects(file.client.responses.create({ model: MODEL, input: 'Hi.', max_output_tokens: 16, store: 'yes' }),
    (e) => e.status === 400 && e.param === 'store');
});

// A completion that ends inside a UTF-8 character counts every token and shows the cut character as
// U+FFFD (as vLLM does), in the text and in the stream. Token 163 of the byte-level vocabulary is the
// byte 0xE4, the lead byte of a three-byte character: forced for the only token, nothing completes it.
test('a trailing incomplete UTF-8 byte is counted and shown as U+FFFD', async () => {
  const req = { model: MODEL, prompt: [0, 19923, 14], max_tokens: 1, temperature: 0, ignore_eos: true,
    logit_bias: { 163: 100 } };
  const r = await file.client.completions.create(req);
  assert.equal(r.usage.completion_tokens, 1);
  assert.equal(r.choices[0].text, '\uFFFD');
  const stream = await file.client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) text += c.text;
  }
  assert.equal(text, '\uFFFD');
  assert.equal(usage.completion_tokens, 1);
});
