// `dsinfer cluster` (a router plus prefill and decode workers, real processes) against one `dsinfer serve`
// on the same tiny model: the official clients see the same outputs (greedy and seeded, streamed and not,
// tools, structured output, usage, errors), a decode worker killed mid-stream does not change the stream
// (structured output included), a killed prefill worker's requests are retried, and a worker that stops
// heartbeating leaves the pool and rejoins.
import { spawn } from 'node:child_process';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, before, after } from 'node:test';
import { env, npm, serverEnv, startDsinfer, startServer, metrics, routerWorkers, waitFor, MODEL } from './harness.mjs';

// Handoffs over TCP (the transport a multi-machine cluster uses without RDMA).
const CLUSTER_ENV = { UCX_TLS: 'tcp' };

function startCluster(nPrefill, nDecode, extra = []) {
  return startDsinfer('cluster', ['--model', env('DSINFER_E2E_MODEL'), '--prefill', String(nPrefill),
    '--decode', String(nDecode), '--port', '0', '--served-model-name', MODEL, '--lease', '2', ...extra],
  { env: CLUSTER_ENV });
}

const workers = (cluster) => routerWorkers(cluster.url);

const pidOf = (id) => Number(id.slice(id.lastIndexOf('-') + 1));

// The decode worker this router has a request on now (its id ends with its pid).
async function busyDecodeWorker(cluster) {
  const m = await metrics(cluster);
  for (const [key, v] of m.values) {
    const hit = key.match(/^dsinfer_router_worker_routed_requests\{worker="(decode-[^"]+)"\}$/);
    if (hit && v > 0) return hit[1];
  }
  return null;
}

// A decode worker to spare for each kill -9 below.
const DECODE_WORKERS = 5;
let single;
let cluster;
let one;   // OpenAI client on the single server
let many;  // on the cluster
const OpenAI = npm('openai');
const Anthropic = npm('@anthropic-ai/sdk');

before(async () => {
  single = await startServer([]);
  cluster = await startCluster(2, DECODE_WORKERS);
  one = new OpenAI({ baseURL: `${single.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  many = new OpenAI({ baseURL: `${cluster.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});

const alive = (pid) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

after(async () => {
  if (cluster) {
    const pids = (await workers(cluster)).workers.map((w) => pidOf(w.id));
    assert.ok(pids.length > 0);
    cluster.proc.kill('SIGTERM');
    const { code } = await cluster.exited;
    assert.equal(code, 0, `cluster exit code\n${cluster.stderr()}`);
    assert.match(cluster.stdout(), /dsinfer cluster: stopped/);
    for (const pid of pids) assert.ok(!alive(pid), `worker ${pid} outlived the cluster`);
  }
  if (single) await single.stop();
});

const chat = (extra = {}) => ({
  model: MODEL,
  messages: [{ role: 'user', content: 'Tell me about the sea and the sky.' }],
  max_tokens: 40,
  temperature: 0,
  ...extra,
});

async function streamText(client, req) {
  let text = '';
  let usage = null;
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content) text += chunk.choices[0].delta.content;
    if (chunk.usage) usage = chunk.usage;
  }
  return { text, usage };
}

test('the cluster registered every worker and serves /v1/models', async () => {
  const w = await workers(cluster);
  assert.equal(w.prefill, 2);
  assert.equal(w.decode, DECODE_WORKERS);
  const models = await many.models.list();
  assert.equal(models.data[0].id, MODEL);
});

test('chat completions: greedy and seeded outputs equal one process, with usage', async () => {
  for (const extra of [{}, { temperature: 0.8, seed: 1234 }, { temperature: 0.9, top_p: 0.9, seed: 99 }]) {
    const a = await one.chat.completions.create(chat(extra));
    const b = await many.chat.completions.create(chat(extra));
    assert.equal(b.choices[0].message.content, a.choices[0].message.content, JSON.stringify(extra));
    assert.equal(b.choices[0].finish_reason, a.choices[0].finish_reason);
    assert.deepEqual(b.usage.completion_tokens, a.usage.completion_tokens);
    assert.deepEqual(b.usage.prompt_tokens, a.usage.prompt_tokens);
  }
});

test('chat completions streamed equal one process', async () => {
  const a = await streamText(one, chat({ temperature: 0.7, seed: 5 }));
  const b = await streamText(many, chat({ temperature: 0.7, seed: 5 }));
  assert.equal(b.text, a.text);
  assert.ok(b.usage && b.usage.completion_tokens > 0);
  assert.equal(b.usage.completion_tokens, a.usage.completion_tokens);
});

test('completions with logprobs and a single-token request equal one process', async () => {
  const req = { model: MODEL, prompt: 'Once upon a time', max_tokens: 12, temperature: 0, logprobs: 2 };
  const a = await one.completions.create(req);
  const b = await many.completions.create(req);
  assert.equal(b.choices[0].text, a.choices[0].text);
  assert.deepEqual(b.choices[0].logprobs.tokens, a.choices[0].logprobs.tokens);
  for (let i = 0; i < a.choices[0].logprobs.token_logprobs.length; ++i)
    assert.ok(Math.abs(b.choices[0].logprobs.token_logprobs[i] - a.choices[0].logprobs.token_logprobs[i]) < 1e-4);
  const a1 = await one.completions.create({ ...req, max_tokens: 1 });
  const b1 = await many.completions.create({ ...req, max_tokens: 1 });
  assert.equal(b1.choices[0].text, a1.choices[0].text);
  assert.equal(b1.choices[0].finish_reason, 'length');
});

test('tools: the same tool call or text as one process', async () => {
  const req = chat({
    tools: [{ type: 'function', function: { name: 'get_weather', description: 'weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }],
    max_tokens: 60,
  });
  const a = await one.chat.completions.create(req);
  const b = await many.chat.completions.create(req);
  assert.deepEqual(b.choices[0].message.tool_calls ?? null, a.choices[0].message.tool_calls ?? null);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
});

test('Anthropic messages, streamed and not, equal one process', async () => {
  const ca = new Anthropic({ baseURL: single.url, apiKey: 'unused', maxRetries: 0 });
  const cb = new Anthropic({ baseURL: cluster.url, apiKey: 'unused', maxRetries: 0 });
  const req = { model: MODEL, max_tokens: 30, temperature: 0, messages: [{ role: 'user', content: 'Hello there' }] };
  // A thinking block's signature is derived from the message id, which differs per response.
  const content = (m) => m.content.map(({ signature, ...block }) => block);
  const a = await ca.messages.create(req);
  const b = await cb.messages.create(req);
  assert.deepEqual(content(b), content(a));
  assert.equal(b.usage.output_tokens, a.usage.output_tokens);
  const sb = await cb.messages.stream(req).finalMessage();
  assert.deepEqual(content(sb), content(a));
});

test('errors: unknown model, too long, a bad grammar are refused cleanly', async () => {
  await assert.rejects(many.chat.completions.create(chat({ model: 'nope' })), (e) => e.status === 404);
  await assert.rejects(many.chat.completions.create(chat({ max_tokens: 10_000_000 })), (e) => e.status === 400);
  await assert.rejects(many.chat.completions.create(chat({ regex: '(a' })),
    (e) => e.status === 400 && /regex line 1 column 1: unclosed/.test(e.message));
  // The cluster still serves afterwards.
  const ok = await many.chat.completions.create(chat({ max_tokens: 3 }));
  assert.equal(ok.choices.length, 1);
});

test('router metrics: per-worker load, queue per bucket, handoffs, imbalance', async () => {
  const m = await metrics(cluster);
  assert.ok(m.get('dsinfer_router_handoffs_total') > 0);
  assert.ok(m.get('dsinfer_router_handoff_bytes_total') > 0);
  assert.equal(m.get('dsinfer_router_worker_live'), 2 + DECODE_WORKERS);
  assert.ok(m.values.has('dsinfer_router_prefill_queue{bucket="0-16384"}'));
  assert.ok(m.get('dsinfer_router_imbalance', { of: 'decode_requests' }) >= 1);
});

test('a worker that stops heartbeating leaves the pool and rejoins', async () => {
  const w = await workers(cluster);
  const victim = w.workers.find((x) => x.role === 'decode');
  const pid = pidOf(victim.id);
  process.kill(pid, 'SIGSTOP');
  try {
    await waitFor(async () => (await workers(cluster)).decode === DECODE_WORKERS - 1, { timeoutMs: 30000, what: 'lease expiry' });
    // Requests still go through the other decode worker.
    const r = await many.chat.completions.create(chat({ max_tokens: 5 }));
    assert.equal(r.choices.length, 1);
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  await waitFor(async () => (await workers(cluster)).decode === DECODE_WORKERS, { timeoutMs: 30000, what: 'rejoin' });
});

// The decode worker serving a long stream is frozen, then killed: the same stream continues on the other
// pair with exactly the text an uninterrupted run gives. With penalties the tokens delivered before the
// kill must count as output on the new pair (output_in_prompt), not as prompt.
for (const [name, extra] of [
  ['greedy', {}],
  ['seeded', { temperature: 0.8, seed: 4242 }],
  ['seeded, frequency and presence penalties', { temperature: 0.8, seed: 4242, frequency_penalty: 1.5,
    presence_penalty: 1.0 }],
]) {
  test(`kill -9 of the decode worker mid-stream: the stream continues identically (${name})`, async () => {
    const req = { model: MODEL, prompt: 'The history of the world, part one:', max_tokens: 300, ignore_eos: true,
      temperature: 0, ...extra };
    const want = (await one.completions.create(req)).choices[0].text;
    const before = (await metrics(cluster)).get('dsinfer_router_failovers_total');
    const stream = await many.completions.create({ ...req, stream: true });
    let text = '';
    let chunks = 0;
    let killed = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
      if (++chunks === 3) {
        const id = await waitFor(() => busyDecodeWorker(cluster), { what: 'the busy decode worker' });
        killed = pidOf(id);
        process.kill(killed, 'SIGSTOP');  // no more tokens from it: the kill lands mid-stream for sure
        process.kill(killed, 'SIGKILL');
      }
    }
    assert.ok(killed, 'the stream was too short to kill its worker');
    assert.equal(text, want);
    assert.ok((await metrics(cluster)).get('dsinfer_router_failovers_total') > before);
  });
}

// Structured output: the router sends the constraint's source to both workers, which compile it and
// resume the matcher where the handed-off (or failed-over) stream stands. The story's pattern bounds the
// output, so a random-weight model finishes it; in thinking mode the reasoning before </think> is free
// (and may run to max_tokens), the JSON follows it.
const STORY = { type: 'object', properties: { story: { type: 'string', pattern: '^[a-z ]{40,80}$' } },
  required: ['story'], additionalProperties: false };
const storyReq = (extra = {}) => chat({ max_tokens: 400, thinking: { type: 'disabled' },
  response_format: { type: 'json_schema', json_schema: { name: 'story', strict: true, schema: STORY } }, ...extra });
const validStory = (text) => {
  const v = JSON.parse(text);
  assert.deepEqual(Object.keys(v), ['story']);
  assert.match(v.story, /^[a-z ]{40,80}$/);
};

test('structured output (json_schema, regex, json_object) equals one process and is valid', async () => {
  for (const extra of [{}, { temperature: 0.8, seed: 77 }]) {
    const a = await one.chat.completions.create(storyReq(extra));
    const b = await many.chat.completions.create(storyReq(extra));
    assert.equal(b.choices[0].message.content, a.choices[0].message.content, JSON.stringify(extra));
    assert.equal(b.choices[0].finish_reason, a.choices[0].finish_reason);
    assert.equal(b.choices[0].finish_reason, 'stop');
    validStory(b.choices[0].message.content);
  }
  // Thinking: the constraint's gate opens at </think> on whichever worker produces it.
  const t = storyReq({ thinking: { type: 'enabled' }, temperature: 0.8, seed: 5 });
  const ta = await one.chat.completions.create(t);
  const tb = await many.chat.completions.create(t);
  assert.equal(tb.choices[0].message.content, ta.choices[0].message.content);
  assert.equal(tb.choices[0].message.reasoning_content, ta.choices[0].message.reasoning_content);
  const re = chat({ regex: '\\(\\d{3}\\) \\d{3}-\\d{4}', thinking: { type: 'disabled' } });
  const ra = await one.chat.completions.create(re);
  const rb = await many.chat.completions.create(re);
  assert.equal(rb.choices[0].message.content, ra.choices[0].message.content);
  assert.match(rb.choices[0].message.content, /^\(\d{3}\) \d{3}-\d{4}$/);
  const jo = chat({ response_format: { type: 'json_object' }, max_tokens: 30, thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'Reply in JSON.' }] });
  const ja = await one.chat.completions.create(jo);
  const jb = await many.chat.completions.create(jo);
  assert.equal(jb.choices[0].message.content, ja.choices[0].message.content);
});

test('kill -9 of the decode worker of a json_schema stream: the same valid JSON as one process', async () => {
  const req = storyReq({ temperature: 0.8, seed: 4343 });
  const want = (await one.chat.completions.create(req)).choices[0].message.content;
  const before = (await metrics(cluster)).get('dsinfer_router_failovers_total');
  const stream = await many.chat.completions.create({ ...req, stream: true });
  let text = '';
  let chunks = 0;
  let killed = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (++chunks === 4) {
      const id = await waitFor(() => busyDecodeWorker(cluster), { what: 'the busy decode worker' });
      killed = pidOf(id);
      process.kill(killed, 'SIGSTOP');  // no more tokens from it: the kill lands mid-stream for sure
      process.kill(killed, 'SIGKILL');
    }
  }
  assert.ok(killed, 'the stream was too short to kill its worker');
  assert.equal(text, want);
  validStory(text);
  assert.ok((await metrics(cluster)).get('dsinfer_router_failovers_total') > before);
});

test('kill -9 of a prefill worker: its requests are retried on another', async () => {
  const w = await workers(cluster);
  const victim = w.workers.find((x) => x.role === 'prefill');
  process.kill(pidOf(victim.id), 'SIGKILL');
  // Until its lease runs out the router still sends it work: those requests fail over.
  const reqs = [];
  for (let i = 0; i < 4; ++i) reqs.push(many.chat.completions.create(chat({ max_tokens: 8, seed: i, temperature: 0.5 })));
  const got = await Promise.all(reqs);
  for (let i = 0; i < 4; ++i) {
    const want = await one.chat.completions.create(chat({ max_tokens: 8, seed: i, temperature: 0.5 }));
    assert.equal(got[i].choices[0].message.content, want.choices[0].message.content);
  }
  await waitFor(async () => (await workers(cluster)).prefill === 1, { timeoutMs: 30000, what: 'the dead worker leaving' });
});

test('a worker that cannot start fails the cluster with its name', async () => {
  // A model directory without weights: the router starts (it needs none), the workers cannot.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsinfer-cluster-'));
  try {
    for (const f of ['config.json', 'tokenizer.json']) fs.copyFileSync(path.join(env('DSINFER_E2E_MODEL'), f), path.join(dir, f));
    const proc = spawn(env('DSINFER_BIN'), ['cluster', '--model', dir, '--prefill', '1', '--decode', '1', '--port', '0'],
      { stdio: ['ignore', 'pipe', 'pipe'], env: serverEnv(CLUSTER_ENV) });
    let err = '';
    proc.stderr.on('data', (d) => { err += d; });
    proc.stdout.resume();
    const code = await new Promise((resolve) => proc.on('exit', (c) => resolve(c)));
    assert.equal(code, 1);
    assert.match(err, /dsinfer cluster: (prefill|decode) worker 1 \(pid \d+\) failed to start: exit status \d+/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
