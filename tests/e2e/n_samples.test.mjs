// n > 1 and best_of against the real server with the official client: n choices indexed 0..n-1 (also
// streamed), usage with the prompt counted once, the seed rule (choice i samples with seed + i, so it
// equals the n = 1 request with that seed), best_of's ranking, the bounds, and the prompt computed once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openaiServerForFile, MODEL, metrics, startServer, waitFor } from './harness.mjs';


// No persistent KV store: a prompt must not hit what an earlier run of this file left on disk.
const file = openaiServerForFile(['--no-kv-store']);

const chat = (extra) => ({
  model: MODEL, temperature: 1, max_tokens: 6, thinking: { type: 'disabled' }, ignore_eos: true,
  messages: [{ role: 'user', content: 'Tell me a story.' }], ...extra,
});
const completion = (extra) => ({
  model: MODEL, prompt: 'Once upon a time', temperature: 1, max_tokens: 6, ignore_eos: true, ...extra,
});

test('chat n=3 gives three choices indexed 0..2, the prompt counted once', async () => {
  const one = await file.client.chat.completions.create(chat({ seed: 7 }));
  const r = await file.client.chat.completions.create(chat({ n: 3, seed: 7 }));
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  for (const c of r.choices) assert.equal(c.finish_reason, 'length');
  assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);
  assert.equal(r.usage.completion_tokens, 18);
  assert.equal(r.usage.total_tokens, one.usage.prompt_tokens + 18);
});

test('chat n=3 with a seed: choice i is the n=1 request with seed + i', async () => {
  const seed = 1234;
  const r = await file.client.chat.completions.create(chat({ n: 3, seed }));
  const texts = r.choices.map((c) => c.message.content);
  for (let i = 0; i < 3; ++i) {
    const single = await file.client.chat.completions.create(chat({ seed: seed + i }));
    assert.equal(texts[i], single.choices[0].message.content, `choice ${i}`);
  }
  assert.ok(new Set(texts).size > 1, `the choices differ: ${JSON.stringify(texts)}`);
});

test('completions n=2 with a seed: choice i is the n=1 request with seed + i', async () => {
  const seed = 99;
  const r = await file.client.completions.create(completion({ n: 2, seed }));
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  assert.equal(r.usage.completion_tokens, 12);
  for (let i = 0; i < 2; ++i) {
    const single = await file.client.completions.create(completion({ seed: seed + i }));
    assert.equal(r.choices[i].text, single.choices[0].text, `choice ${i}`);
    assert.equal(r.usage.prompt_tokens, single.usage.prompt_tokens);
  }
});

test('n out of 1..16 is a 400', async () => {
  for (const n of [0, 17, 100]) {
    await assert.rejects(file.client.chat.completions.create(chat({ n })), (e) => e.status === 400 && /'n'/.test(e.message),
      `chat n=${n}`);
    await assert.rejects(file.client.completions.create(completion({ n })), (e) => e.status === 400, `completions n=${n}`);
  }
});

// Streamed: each chunk's choices[].index says whose it is; one usage chunk (prompt once, completion
// tokens summed) and one [DONE] (the client would stop reading at the first).
test('streamed chat n=2 reassembles to the non-streamed choices', async () => {
  const seed = 555;
  const whole = await file.client.chat.completions.create(chat({ n: 2, seed }));
  const stream = await file.client.chat.completions.create(chat({ n: 2, seed, stream: true,
    stream_options: { include_usage: true } }));
  const texts = ['', ''];
  const finishes = [null, null];
  const usages = [];
  for await (const chunk of stream) {
    if (chunk.usage) usages.push(chunk.usage);
    for (const c of chunk.choices) {
      texts[c.index] += c.delta.content ?? '';
      if (c.finish_reason) finishes[c.index] = c.finish_reason;
    }
  }
  assert.deepEqual(texts, whole.choices.map((c) => c.message.content));
  assert.deepEqual(finishes, ['length', 'length']);
  assert.equal(usages.length, 1);
  assert.equal(usages[0].completion_tokens, 12);
  assert.equal(usages[0].prompt_tokens, whole.usage.prompt_tokens);
});

test('streamed completions n=2 reassembles to the non-streamed choices', async () => {
  const seed = 556;
  const whole = await file.client.completions.create(completion({ n: 2, seed }));
  const stream = await file.client.completions.create(completion({ n: 2, seed, stream: true,
    stream_options: { include_usage: true } }));
  const texts = ['', ''];
  let usage;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) texts[c.index] += c.text;
  }
  assert.deepEqual(texts, whole.choices.map((c) => c.text));
  assert.equal(usage.completion_tokens, 12);
});

// A response_format's matcher holds one request's state: each choice has its own, so each choice is
// the constrained n=1 request with its seed and is valid JSON of the schema.
test('n=3 with a json_schema: every choice is its own constrained request', async () => {
  const schema = { type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 9 },
    b: { enum: ['x', 'y'] } }, required: ['a', 'b'], additionalProperties: false };
  const ask = (extra) => file.client.chat.completions.create(chat({ max_tokens: 200, ignore_eos: false,
    response_format: { type: 'json_schema', json_schema: { name: 'out', strict: true, schema } }, ...extra }));
  const seed = 11;
  const r = await ask({ n: 3, seed });
  let finished = 0;
  for (let i = 0; i < 3; ++i) {
    const single = await ask({ seed: seed + i });
    assert.equal(r.choices[i].message.content, single.choices[0].message.content, `choice ${i}`);
    if (r.choices[i].finish_reason !== 'stop') continue;
    ++finished;
    const v = JSON.parse(r.choices[i].message.content);
    assert.ok(Number.isInteger(v.a) && v.a >= 0 && v.a <= 9 && ['x', 'y'].includes(v.b), r.choices[i].message.content);
  }
  assert.ok(finished >= 1, 'at least one choice finished within max_tokens');
});

// What the server's metrics say about requests in flight and cancelled ones.
async function state() {
  const m = await metrics(file.server);
  return {
    inFlight: m.get('dsinfer_requests_in_flight'),
    running: m.get('dsinfer_engine_running_requests'),
    waiting: m.get('dsinfer_engine_waiting_requests'),
    cancelled: m.get('dsinfer_requests_cancelled_total', { why: 'client_disconnect' }) ?? 0,
    finishedCancelled: m.get('dsinfer_requests_finished_total', { reason: 'cancelled' }) ?? 0,
  };
}

// A client that leaves cancels every choice: all n engine requests end cancelled, nothing keeps running.
test('aborting a streamed n=3 call cancels all three choices', async () => {
  const before = await state();
  const stream = await file.client.chat.completions.create(chat({ n: 3, max_tokens: 5000, stream: true }));
  let chunks = 0;
  for await (const chunk of stream) {
    if (chunk.choices.length) chunks++;
    if (chunks >= 6) break;  // leaving the loop aborts the HTTP request
  }
  const after = await waitFor(async () => {
    const s = await state();
    return s.cancelled === before.cancelled + 3 && s.inFlight === 0 && s.running === 0 && s.waiting === 0 ? s : null;
  }, { what: 'three cancellations in /metrics' });
  assert.equal(after.finishedCancelled, before.finishedCancelled + 3);
});

// best_of: candidate i is the n=1 request with seed + i; the answer is the n candidates with the highest
// sum of token logprobs, computed here from those separate requests' own logprobs.
test('best_of answers the candidates with the highest logprob sums', async () => {
  const seed = 4321;
  const singles = [];
  for (let i = 0; i < 4; ++i) {
    const r = await file.client.completions.create(completion({ seed: seed + i, logprobs: 0 }));
    singles.push({ text: r.choices[0].text, sum: r.choices[0].logprobs.token_logprobs.reduce((a, b) => a + b, 0) });
  }
  const ranked = [...singles].sort((a, b) => b.sum - a.sum);
  assert.ok(ranked[0].sum - ranked[1].sum > 1e-3 && ranked[1].sum - ranked[2].sum > 1e-3, 'no near tie');
  const one = await file.client.completions.create(completion({ seed, best_of: 4 }));
  assert.equal(one.choices.length, 1);
  assert.equal(one.choices[0].text, ranked[0].text);
  assert.equal(one.choices[0].logprobs, null);  // not asked for
  const two = await file.client.completions.create(completion({ seed, best_of: 4, n: 2 }));
  assert.deepEqual(two.choices.map((c) => c.index), [0, 1]);
  assert.deepEqual(two.choices.map((c) => c.text), [ranked[0].text, ranked[1].text]);
  assert.equal(two.usage.completion_tokens, 24);  // every candidate was generated
});

// Chat Completions has no best_of (a Completions parameter): refused rather than ignored; 1 is a no-op.
test('chat best_of above 1 is a 400, best_of 1 is n=1', async () => {
  for (const best_of of [2, 16]) {
    await assert.rejects(file.client.chat.completions.create(chat({ best_of })),
      (e) => e.status === 400 && e.code === 'unsupported_parameter' && e.param === 'best_of', `best_of ${best_of}`);
  }
  const one = await file.client.chat.completions.create(chat({ best_of: 1, seed: 3 }));
  assert.equal(one.choices.length, 1);
});

test('best_of below n, out of range, or streamed is a 400', async () => {
  await assert.rejects(file.client.completions.create(completion({ n: 3, best_of: 2 })),
    (e) => e.status === 400 && /best_of/.test(e.message));
  await assert.rejects(file.client.completions.create(completion({ best_of: 17 })), (e) => e.status === 400);
  await assert.rejects(file.client.completions.create(completion({ best_of: 2, stream: true })),
    (e) => e.status === 400 && /best_of/.test(e.message));
});

// n > 1 shares the prompt's KV: choices 1..n-1 start when choice 0's first token comes, and resume from
// its blocks and the window snapshot at the prompt's last block boundary in the prefix cache. A 600-token
// prompt has 4 full 128-token blocks that can end a resume ((600 - 1) div 128 = 4: 512 tokens), so each
// later choice computes only the last 88. Each choice is still exactly the n = 1 request with seed + i
// computed cold (a server without the prefix cache), token for token and logprob for logprob.
const LONG_PROMPT = Array.from({ length: 600 }, (_, i) => 1000 + ((i * 7919) % 20000));
const RESUMED = 512;

async function engineCounters(server) {
  const m = await metrics(server);
  return {
    prompt: m.get('dsinfer_engine_prompt_tokens_total'),
    cached: m.get('dsinfer_engine_cached_tokens_total'),
    prefill: m.get('dsinfer_engine_prefill_tokens_total'),
    exact: m.get('dsinfer_engine_prefix_cache_exact_hits_total'),
    replay: m.get('dsinfer_engine_prefix_cache_replay_hits_total'),
  };
}

async function longCompletion(server, extra) {
  const r = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: LONG_PROMPT, max_tokens: 8, temperature: 1, ignore_eos: true,
      logprobs: 0, ...extra }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  return r.json();
}

const tokensOf = (choice) => ({ text: choice.text, tokens: choice.logprobs.tokens,
  logprobs: choice.logprobs.token_logprobs });

test('n=4 on a long prompt computes the prompt once; each choice is the cold n=1 request', async () => {
  const seed = 2024;
  const before = await engineCounters(file.server);
  const shared = await longCompletion(file.server, { n: 4, seed });
  const after = await engineCounters(file.server);
  const P = LONG_PROMPT.length;
  assert.equal(shared.usage.prompt_tokens, P);
  assert.equal(shared.usage.prompt_tokens_details.cached_tokens, 0);  // the prompt counted once, as computed
  assert.equal(after.prompt - before.prompt, 4 * P);
  assert.equal(after.cached - before.cached, 3 * RESUMED);
  assert.equal(after.prefill - before.prefill, P + 3 * (P - RESUMED));
  // Resumed from the window snapshot, not rebuilt by the (approximate) SWA replay.
  assert.equal(after.exact - before.exact, 3);
  assert.equal(after.replay - before.replay, 0);

  const cold = await startServer(['--no-prefix-cache']);
  try {
    for (let i = 0; i < 4; ++i) {
      const single = await longCompletion(cold, { seed: seed + i });
      assert.deepEqual(tokensOf(shared.choices[i]), tokensOf(single.choices[0]), `choice ${i}`);
    }
    assert.ok(new Set(shared.choices.map((c) => c.text)).size > 1, 'the choices differ');
    // Without the prefix cache n > 1 still works: every choice computes the prompt.
    const c0 = await engineCounters(cold);
    const unshared = await longCompletion(cold, { n: 4, seed });
    const c1 = await engineCounters(cold);
    assert.equal(c1.prefill - c0.prefill, 4 * P);
    assert.deepEqual(unshared.choices.map(tokensOf), shared.choices.map(tokensOf));
  } finally {
    const { code } = await cold.stop();
    assert.equal(code, 0, cold.stderr());
  }
});

// A client that leaves before choice 0's first token: the later choices, not submitted yet, end with it
// (the leave is usually seen during the long prompt's prefill; the outcome is the same either way).
test('aborting an n=3 call on a long prompt as its headers arrive cancels all three choices', async () => {
  const before = await state();
  const prompt = LONG_PROMPT.map((t) => t + 1);  // not in the cache: choice 0 prefills it all
  const abort = new AbortController();
  const r = await fetch(`${file.server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 5000, ignore_eos: true, n: 3, stream: true }),
    signal: abort.signal,
  });
  assert.equal(r.status, 200);
  abort.abort();
  const after = await waitFor(async () => {
    const s = await state();
    return s.cancelled === before.cancelled + 3 && s.inFlight === 0 && s.running === 0 && s.waiting === 0 ? s : null;
  }, { what: 'three cancellations in /metrics' });
  assert.equal(after.finishedCancelled, before.finishedCancelled + 3);
});
