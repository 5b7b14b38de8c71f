// `dsinfer router` alone: it starts on a model directory without weights (config.json and tokenizer.json
// only), serves the public API with 429 while no worker has registered, takes heartbeats behind the API
// key, and drops a worker whose lease ran out.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, before, after } from 'node:test';
import { env, startDsinfer, parseMetrics, routerWorkers, waitFor, MODEL } from './harness.mjs';

const KEY = 'router-e2e-key';
let dir;
let router;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsinfer-router-'));
  for (const f of ['config.json', 'tokenizer.json', 'tokenizer_config.json']) {
    const src = path.join(env('DSINFER_E2E_MODEL'), f);
    if (fs.existsSync(src)) fs.copyFileSync(src, path.join(dir, f));
  }
  assert.ok(!fs.readdirSync(dir).some((f) => f.endsWith('.safetensors')));
  router = await startDsinfer('router', ['--model', dir, '--port', '0', '--served-model-name', MODEL, '--api-key', KEY,
    '--lease', '1'], { readyTimeoutMs: 120000 });
});

after(async () => {
  const { code } = await router.stop();
  assert.equal(code, 0, router.stderr());
  fs.rmSync(dir, { recursive: true, force: true });
});

const auth = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };

test('serves /v1/models and answers 429 while no worker is registered', async () => {
  const models = await (await fetch(`${router.url}/v1/models`, { headers: auth })).json();
  assert.equal(models.data[0].id, MODEL);
  const r = await fetch(`${router.url}/v1/chat/completions`, {
    method: 'POST', headers: auth,
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
  });
  assert.equal(r.status, 429);
  assert.ok(r.headers.get('retry-after'));
});

test('heartbeats need the key, register workers, and a silent worker leaves the pool', async () => {
  const beat = {
    id: 'decode-127.0.0.1:1-1', role: 'decode', url: 'http://127.0.0.1:1', ucx_address: 'x',
    capacity: { max_running: 4, kv_tokens: 1000 }, load: { running: 0, waiting: 0, kv_tokens_used: 0 },
  };
  const noKey = await fetch(`${router.url}/internal/v1/workers/heartbeat`, { method: 'POST', body: JSON.stringify(beat) });
  assert.equal(noKey.status, 401);
  const bad = await fetch(`${router.url}/internal/v1/workers/heartbeat`, { method: 'POST', headers: auth, body: '{"id":1}' });
  assert.equal(bad.status, 400);
  const ok = await fetch(`${router.url}/internal/v1/workers/heartbeat`, { method: 'POST', headers: auth, body: JSON.stringify(beat) });
  assert.equal(ok.status, 200);
  assert.equal((await ok.json()).lease_ms, 1000);
  const workers = () => routerWorkers(router.url, auth);
  assert.equal((await workers()).decode, 1);
  const m = parseMetrics(await (await fetch(`${router.url}/metrics`)).text());
  assert.equal(m.get('dsinfer_router_worker_live', { worker: beat.id }), 1);
  assert.equal(m.get('dsinfer_router_worker_kv_tokens', { worker: beat.id }), 1000);
  await waitFor(async () => (await workers()).decode === 0, { timeoutMs: 30000, what: 'the lease to run out' });
});
