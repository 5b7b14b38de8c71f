// A router restart with its workers alive: the requests in flight end (their clients see the connection
// close, the workers cancel them and free their KV), and the workers rejoin the new router by heartbeat,
// which then serves as before.
import { spawn } from 'node:child_process';
import assert from 'node:assert/strict';
import net from 'node:net';
import { test, after } from 'node:test';
import { env, npm, serverEnv, startServer, parseMetrics, waitFor, MODEL } from './harness.mjs';

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

function startRouter(port) {
  const proc = spawn(env('DSINFER_BIN'), ['router', '--model', env('DSINFER_E2E_MODEL'), '--port', String(port),
    '--served-model-name', MODEL, '--lease', '2'], { stdio: ['ignore', 'pipe', 'pipe'], env: serverEnv() });
  children.push(proc);
  let out = '';
  proc.stderr.resume();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`router not ready\n${out}`)), 120000);
    proc.stdout.on('data', (d) => {
      out += d;
      if (/dsinfer router: ready/.test(out)) { clearTimeout(timer); resolve(proc); }
    });
  });
}

const workers = async (url) => (await fetch(`${url}/internal/v1/workers`)).json();

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
      if (++chunks === 3) router.kill('SIGKILL');
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
  router.kill('SIGTERM');
  await prefill.stop();
  await decode.stop();
});
