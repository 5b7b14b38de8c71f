// A router restart with its workers alive: the requests in flight end (their clients see the connection
// close, the workers cancel them and free their KV), and the workers rejoin the new router by heartbeat,
// which then serves as before.
import assert from 'node:assert/strict';
import net from 'node:net';
import { test, after } from 'node:test';
import { env, npm, startDsinfer, startServer, parseMetrics, routerWorkers, waitFor, MODEL } from './harness.mjs';

const children = [];
after(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

async function freePort() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

async function startRouter(port) {
  const router = await startDsinfer('router', ['--model', env('DSINFER_E2E_MODEL'), '--port', String(port),
    '--served-model-name', MODEL, '--lease', '2'], { readyTimeoutMs: 120000 });
  children.push(router.proc);
  return router;
}

const workers = (url) => routerWorkers(url);

test('router restart: in-flight requests end, workers rejoin the new router', async () => {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  let router = await startRouter(port);
  const wenv = { env: { UCX_TLS: 'tcp' } };
  const prefill = await startServer(['--role', 'prefill', '--router', url], wenv);
  const decode = await startServer(['--role', 'decode', '--router', url], wenv);
  children.push(prefill.proc, decode.proc);
  await waitFor(async () => { const w = await workers(url); return w.prefill === 1 && w.decode === 1; },
    { timeoutMs: 60000, what: 'registration' });

  const OpenAI = npm('openai');
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
  const stream = await client.completions.create({ model: MODEL, prompt: 'A long story:', max_tokens: 2000,
    ignore_eos: true, temperature: 0, stream: true });
  let chunks = 0;
  await assert.rejects(async () => {
    for await (const chunk of stream) {
      if (++chunks === 3) router.proc.kill('SIGKILL');
      assert.ok(chunk);
    }
  });
  assert.ok(chunks >= 3);
  // The decode worker saw its router connection close and cancelled the request.
  await waitFor(async () => {
    const m = parseMetrics(await (await fetch(`${decode.url}/metrics`)).text());
    return m.get('dsinfer_engine_running_requests') === 0 && m.get('dsinfer_engine_waiting_requests') === 0;
  }, { timeoutMs: 30000, what: 'the decode worker to drop the orphaned request' });

  router = await startRouter(port);
  await waitFor(async () => { const w = await workers(url); return w.prefill === 1 && w.decode === 1; },
    { timeoutMs: 30000, what: 'the workers rejoining' });
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 8, temperature: 0 });
  assert.equal(r.choices[0].finish_reason, 'length');
  await router.stop();
  await prefill.stop();
  await decode.stop();
});
