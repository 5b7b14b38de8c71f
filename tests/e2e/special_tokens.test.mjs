// Special tokens never reach a client's text by default (skip_special_tokens, as vLLM): the model is made
// to emit nothing but EOS (logit_bias +100 with ignore_eos), so without skipping the text would be EOS
// spellings.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openaiServerForFile, MODEL } from './harness.mjs';

const EOS = '<｜end▁of▁sentence｜>';

const file = openaiServerForFile();

const onlyEos = { temperature: 0, ignore_eos: true, logit_bias: { 1: 100 } };

test('completions: EOS spellings are skipped by default, kept with skip_special_tokens: false', async () => {
  const base = { model: MODEL, prompt: 'Hello', max_tokens: 3, ...onlyEos };
  const skipped = await file.client.completions.create(base);
  assert.equal(skipped.usage.completion_tokens, 3);
  assert.equal(skipped.choices[0].text, '');
  const kept = await file.client.completions.create({ ...base, skip_special_tokens: false });
  assert.equal(kept.choices[0].text, EOS.repeat(3));
});

test('chat: EOS spellings are skipped by default, streamed or not', async () => {
  const base = { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], thinking: { type: 'disabled' },
    max_completion_tokens: 3, ...onlyEos };
  const r = await file.client.chat.completions.create(base);
  assert.equal(r.usage.completion_tokens, 3);
  assert.ok(!(r.choices[0].message.content ?? '').includes(EOS), r.choices[0].message.content);
  const stream = await file.client.chat.completions.create({ ...base, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, '');
  const kept = await file.client.chat.completions.create({ ...base, skip_special_tokens: false });
  assert.equal(kept.choices[0].message.content, EOS.repeat(3));
});
