// `dsinfer serve` on a tiny DeepseekV41ForCausalLM checkpoint (configs/tiny-v41.json with the V4.1
// tokenizer): the engine's V4.1 adapter behind the unchanged server, through the official `openai`
// client. The prompt template follows the checkpoint (no --prompt-version given).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openaiServerForFile, startServer, MODEL, npm } from './harness.mjs';

const file = openaiServerForFile();

test('V4.1: chat completion, not streamed', async () => {
  const r = await file.client.chat.completions.create({
    model: MODEL, max_tokens: 8, temperature: 0,
    messages: [{ role: 'user', content: 'Say hello.' }], thinking: { type: 'disabled' },
  });
  assert.equal(r.object, 'chat.completion');
  const c = r.choices[0];
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 8);
});

test('V4.1: chat completion, streamed', async () => {
  const stream = await file.client.chat.completions.create({
    model: MODEL, max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'Count to three.' }], thinking: { type: 'disabled' },
  });
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.ok(['stop', 'length'].includes(finish), String(finish));
  assert.ok(usage && usage.completion_tokens > 0);
});

// A repeat of a long prompt resumes from the prefix cache (whole 128-token blocks) and answers exactly
// as the cold request did, greedy and seeded-sampled.
const long = Array.from({ length: 90 }, (_, i) => `word${i}`).join(' ');
let coldGreedy = null;  // the first server's greedy answer to `long`

test('V4.1: a repeated long prompt is served from the prefix cache with the same answer', async () => {
  for (const sampling of [{ temperature: 0 }, { temperature: 1, seed: 11 }]) {
    const ask = () => file.client.chat.completions.create({
      model: MODEL, max_tokens: 10, ...sampling,
      messages: [{ role: 'user', content: long }], thinking: { type: 'disabled' },
    });
    const cold = await ask();
    const warm = await ask();
    assert.ok(cold.usage.prompt_tokens > 128, `prompt of ${cold.usage.prompt_tokens} tokens`);
    assert.ok(warm.usage.prompt_tokens_details.cached_tokens >= 128,
      `cached ${warm.usage.prompt_tokens_details.cached_tokens}`);
    assert.equal(warm.choices[0].message.content, cold.choices[0].message.content);
    assert.equal(warm.usage.completion_tokens, cold.usage.completion_tokens);
    if (sampling.temperature === 0) coldGreedy = cold.choices[0].message.content;
  }
});

// A second server on the same KV store (DSINFER_HOME): the long prompt's blocks come from the store
// (import_block) and the answer is the first server's; then speculation with DSpark drafts; and the
// first server's default template is the explicit --prompt-version v41 of this one.
test('V4.1: a restarted server resumes from the KV store; --speculation gives the same greedy answer', async () => {
  const ask = (client) => client.chat.completions.create({
    model: MODEL, max_tokens: 12, temperature: 0,
    messages: [{ role: 'user', content: 'Name three colours.' }], thinking: { type: 'disabled' },
  });
  const plain = await ask(file.client);
  // Thinking on (the default) renders differently under the V4 and V4.1 templates (the effort line).
  const thinking = (client) => client.chat.completions.create({
    model: MODEL, max_tokens: 2, temperature: 0, messages: [{ role: 'user', content: 'Why?' }],
  });
  const defaultTemplate = await thinking(file.client);
  const spec = await startServer(['--speculation', '--draft-tokens', '3', '--prompt-version', 'v41']);
  try {
    const OpenAI = npm('openai');
    const client = new OpenAI({ baseURL: `${spec.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
    const stored = await client.chat.completions.create({
      model: MODEL, max_tokens: 10, temperature: 0,
      messages: [{ role: 'user', content: long }], thinking: { type: 'disabled' },
    });
    assert.ok(stored.usage.prompt_tokens_details.cached_tokens > 0, 'a KV store hit');
    assert.equal(stored.choices[0].message.content, coldGreedy);
    const drafted = await ask(client);
    // The first server was started without --prompt-version: its template is V4.1's too.
    assert.equal((await thinking(client)).usage.prompt_tokens, defaultTemplate.usage.prompt_tokens);
    assert.equal(drafted.choices[0].message.content, plain.choices[0].message.content);
    assert.equal(drafted.usage.completion_tokens, plain.usage.completion_tokens);
  } finally {
    const { code } = await spec.stop();
    assert.equal(code, 0);
  }
});
