// Disaggregated workers as real processes: `dsinfer serve --role prefill` and `--role decode` on the tiny
// model, heartbeating to a stand-in router (a node HTTP listener here that records what arrives). The
// test plays the router: POST /internal/v1/prefill to the prefill worker, then /internal/v1/decode to the
// decode worker, which pulls the KV state over UCX and streams NDJSON. The tokens (text) and logprobs
// must equal one colocated `dsinfer serve`'s /v1/completions for the same request: greedy and seeded
// temperature 0.8, speculation off and on, UCX_TLS=tcp and shm.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { spawn } from 'node:child_process';
import { startServer, env, MODEL, waitFor } from './harness.mjs';

const heartbeats = [];
let router;
let routerUrl;

before(async () => {
  router = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/internal/v1/workers/heartbeat') {
        heartbeats.push(JSON.parse(body));
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ lease_ms: 3000 }));
      } else {
        res.writeHead(404);
        res.end();
      }
    });
  });
  await new Promise((r) => router.listen(0, '127.0.0.1', r));
  routerUrl = `http://127.0.0.1:${router.address().port}`;
});
after(() => router.close());

function prompt(n, seed) {
  const ids = [];
  let x = seed;
  for (let i = 0; i < n; ++i) {
    x = (x * 1103515245 + 12345) % 2147483648;
    ids.push(10 + (x % 3000));
  }
  return ids;
}

const cases = [
  { name: 'greedy', prompt: prompt(150, 1), sampling: { temperature: 0 }, max_tokens: 16 },
  { name: 'seeded 0.8', prompt: prompt(77, 2), sampling: { temperature: 0.8, seed: 4242 }, max_tokens: 16 },
];

// What one colocated server answers, as text + per-token logprobs.
async function colocated(server, c) {
  const r = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: c.prompt, max_tokens: c.max_tokens, ignore_eos: true, logprobs: 1,
      temperature: c.sampling.temperature, ...(c.sampling.seed !== undefined ? { seed: c.sampling.seed } : {}) }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  const j = await r.json();
  return { text: j.choices[0].text, logprobs: j.choices[0].logprobs.token_logprobs, finish: j.choices[0].finish_reason };
}

function decodeText(ids) {
  return new Promise((resolve, reject) => {
    const p = spawn(env('DSINFER_BIN'), ['tokenize', '--decode', '--skip-special-tokens', '--tokenizer',
      `${env('DSINFER_E2E_MODEL')}/tokenizer.json`], { stdio: ['pipe', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out).text) : reject(new Error(`tokenize exited ${code}`))));
    p.stdin.end(JSON.stringify({ ids }) + '\n');
  });
}

let nextTransfer = 1;

// The router's part, step 1: prefill (the state then waits for the decode worker at decodeUcx).
async function prefillStep(prefill, decodeUcx, c) {
  const transfer = nextTransfer++;
  const body = { transfer, prompt_ids: c.prompt, sampling: { ...c.sampling, top_logprobs: 1 }, stop_token_ids: [],
    ignore_eos: true, max_tokens: c.max_tokens, traffic_class: 'default', output_in_prompt: c.output_in_prompt ?? 0 };
  const p = await fetch(`${prefill.url}/internal/v1/prefill`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, decode_ucx_address: decodeUcx }),
  });
  const pj = await p.json();
  assert.equal(p.status, 200, JSON.stringify(pj));
  assert.equal(pj.finish, 'none');
  assert.equal(pj.prompt_tokens, c.prompt.length - (c.output_in_prompt ?? 0));
  assert.ok(pj.state_bytes > 0);
  return { body, pj };
}

// Step 2: decode; returns the text + per-token logprobs of the whole request.
async function decodeStep(decode, { body, pj }, c) {
  const d = await fetch(`${decode.url}/internal/v1/decode`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, first_token: pj.first_token }),
  });
  assert.equal(d.status, 200);
  assert.match(d.headers.get('content-type'), /application\/x-ndjson/);
  const lines = (await d.text()).split('\n').filter((l) => l).map((l) => JSON.parse(l));
  const last = lines.pop();
  assert.equal(last.finish, 'length', JSON.stringify(last));
  const tokens = [pj.first_token];
  const logprobs = [pj.logprobs.logprob];
  for (const l of lines) {
    tokens.push(...l.tokens);
    assert.equal(l.logprobs.length, l.tokens.length);
    logprobs.push(...l.logprobs.map((x) => x.logprob));
  }
  assert.equal(tokens.length, c.max_tokens - (c.output_in_prompt ?? 0));
  return { text: await decodeText(tokens), logprobs, finish: 'length', tokens };
}

async function disaggregated(prefill, decode, decodeUcx, c) {
  return decodeStep(decode, await prefillStep(prefill, decodeUcx, c), c);
}

async function health(server, headers = {}) {
  const r = await fetch(`${server.url}/internal/v1/health`, { headers });
  assert.equal(r.status, 200);
  return r.json();
}

for (const speculation of [false, true]) {
  const flags = ['--no-kv-store', ...(speculation ? ['--speculation'] : [])];
  test(`prefill + decode workers equal one process (speculation ${speculation ? 'on' : 'off'})`, async (t) => {
    const single = await startServer(flags);
    const want = [];
    try {
      for (const c of cases) want.push(await colocated(single, c));
    } finally {
      assert.equal((await single.stop()).code, 0);
    }
    for (const tls of ['tcp', 'shm']) {
      await t.test(`UCX_TLS=${tls}`, async () => {
        const role = (r) => [...flags, '--role', r, '--router', routerUrl, '--ucx-address', tls === 'shm' ? 'worker' : 'listener'];
        const opts = { env: { UCX_TLS: tls } };
        const [prefill, decode] = await Promise.all([startServer(role('prefill'), opts), startServer(role('decode'), opts)]);
        try {
          assert.deepEqual((await health(prefill)).role, 'prefill');
          const dh = await health(decode);
          assert.equal(dh.role, 'decode');
          assert.equal(dh.ready, true);
          if (tls === 'shm') assert.match(dh.ucx_address, /^ucx:/);
          const ids = [];
          for (let i = 0; i < cases.length; ++i) {
            const got = await disaggregated(prefill, decode, dh.ucx_address, cases[i]);
            assert.equal(got.text, want[i].text, `${cases[i].name}: text`);
            assert.deepEqual(got.logprobs, want[i].logprobs, `${cases[i].name}: logprobs`);
            assert.equal(got.finish, want[i].finish);
            ids.push(got.tokens);
          }
          // Failover as the router does it: the greedy stream resumed after 5 tokens (prompt + those tokens,
          // output_in_prompt 5) continues with exactly the remaining tokens and logprobs.
          const c0 = cases[0];
          const resumed = await disaggregated(prefill, decode, dh.ucx_address,
            { ...c0, prompt: [...c0.prompt, ...ids[0].slice(0, 5)], output_in_prompt: 5 });
          assert.deepEqual(resumed.tokens, ids[0].slice(5));
          assert.deepEqual(resumed.logprobs, want[0].logprobs.slice(5));
          // Two states waiting at once, claimed in the opposite order, concurrently: neither waits for the
          // other (one handoff thread serves every transfer in flight).
          const first = await prefillStep(prefill, dh.ucx_address, cases[0]);
          const second = await prefillStep(prefill, dh.ucx_address, cases[1]);
          const [got1, got0] = await Promise.all([decodeStep(decode, second, cases[1]), decodeStep(decode, first, cases[0])]);
          assert.equal(got0.text, want[0].text);
          assert.equal(got1.text, want[1].text);
          assert.deepEqual(got1.logprobs, want[1].logprobs);
          // The prefill worker's states were all claimed, none left to time out.
          const m = await (await fetch(`${prefill.url}/metrics`)).text();
          assert.match(m, new RegExp(`dsinfer_handoff_offers_claimed_total\\{role="prefill"\\} ${cases.length + 3}\\b`));
          assert.match(m, /dsinfer_handoff_offers_unclaimed_total\{role="prefill"\} 0\b/);
          // The decode worker timed each handoff's phases (disagg README "Where a handoff's time goes").
          const dm = await (await fetch(`${decode.url}/metrics`)).text();
          for (const phase of ['claim_wait', 'pull', 'first_event']) {
            const hit = dm.match(new RegExp(`dsinfer_handoff_${phase}_seconds_total\\{role="decode"\\} ([0-9.e+-]+)`));
            assert.ok(hit && Number(hit[1]) > 0, `${phase}: ${hit}`);
          }
          // Heartbeats from both, with the protocol's fields.
          for (const [w, r] of [[prefill, 'prefill'], [decode, 'decode']]) {
            const hb = await waitFor(() => heartbeats.find((h) => h.url === w.url), { what: `${r} heartbeat` });
            assert.equal(hb.role, r);
            assert.match(hb.id, new RegExp(`^${r}-127\\.0\\.0\\.1:${w.port}-\\d+$`));
            assert.equal(typeof hb.ucx_address, 'string');
            assert.ok(hb.ucx_address.length > 0);
            assert.ok(hb.capacity.max_running > 0 && hb.capacity.kv_tokens > 0, JSON.stringify(hb));
            for (const k of ['running', 'waiting', 'kv_tokens_used', 'prefill_tokens'])
              assert.equal(typeof hb.load[k], 'number', k);
          }
        } finally {
          const [a, b] = await Promise.all([prefill.stop(), decode.stop()]);
          assert.equal(a.code, 0, prefill.stderr());
          assert.equal(b.code, 0, decode.stderr());
        }
      });
    }
  });
}

test('an unclaimed state is freed at the timeout; a state that never comes fails the decode; bad requests are refused', async () => {
  const args = (r) => ['--no-kv-store', '--role', r, '--router', routerUrl, '--handoff-timeout', '1'];
  const [prefill, decode] = await Promise.all([startServer(args('prefill'), { env: { UCX_TLS: 'tcp' } }),
    startServer([...args('decode'), '--api-key', 'sekrit'], { env: { UCX_TLS: 'tcp' } })]);
  const auth = { authorization: 'Bearer sekrit', 'content-type': 'application/json' };
  try {
    // With --api-key the internal routes want the key too.
    assert.equal((await fetch(`${decode.url}/internal/v1/health`)).status, 401);
    const dh = await health(decode, auth);
    await prefillStep(prefill, dh.ucx_address, cases[0]);  // nobody claims it
    // The descriptor must reach the idle decode worker (it progresses UCX while it has no handoff), and the
    // state is freed at the timeout.
    const m = await waitFor(async () => {
      const text = await (await fetch(`${prefill.url}/metrics`)).text();
      return /dsinfer_handoff_offers_(unclaimed|failed)_total\{role="prefill"\} 1\b/.test(text) && text;
    }, { what: 'the unclaimed state to be freed' });
    assert.match(m, /dsinfer_handoff_offers_unclaimed_total\{role="prefill"\} 1\b/);
    assert.match(m, /dsinfer_handoff_offers_failed_total\{role="prefill"\} 0\b/);
    const body = { transfer: 999, prompt_ids: [5, 6, 7], first_token: 8, sampling: { temperature: 0 }, max_tokens: 4 };
    const r = await fetch(`${decode.url}/internal/v1/decode`, { method: 'POST', headers: auth, body: JSON.stringify(body) });
    assert.equal(r.status, 504);
    assert.match((await r.json()).error.message, /did not arrive/);
    const wrong = await fetch(`${decode.url}/internal/v1/prefill`, { method: 'POST', headers: auth, body: '{}' });
    assert.equal(wrong.status, 404);
    const bad = await fetch(`${decode.url}/internal/v1/decode`, { method: 'POST', headers: auth, body: '{"transfer": 1}' });
    assert.equal(bad.status, 400);
  } finally {
    const [a, b] = await Promise.all([prefill.stop(), decode.stop()]);
    assert.equal(a.code, 0, prefill.stderr());
    assert.equal(b.code, 0, decode.stderr());
  }
});
