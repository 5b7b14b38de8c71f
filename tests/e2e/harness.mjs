// Starts the real `dsinfer serve` (or router, cluster) on the tiny model for the end-to-end tests and talks to it.
// Environment (set by tests/e2e/CMakeLists.txt): DSINFER_BIN, DSINFER_E2E_MODEL (a model directory made
// by `dsinfer mkmodel`), NODE_PATH (the npm packages of scripts/npm).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import net from 'node:net';
import assert from 'node:assert/strict';
import { before, after } from 'node:test';

export const MODEL = 'tiny-e2e';

// npm packages from NODE_PATH (<repo>/.cache/npm/node_modules): ES module imports ignore NODE_PATH,
// CommonJS require honours it.
const require = createRequire(import.meta.url);
export function npm(name) {
  try {
    const m = require(name);
    return m.default ?? m;
  } catch (e) {
    throw new Error(`npm package ${name} not found (NODE_PATH=${process.env.NODE_PATH}); run scripts/setup.sh: ${e.message}`);
  }
}

export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run the tests through ctest: ctest -L e2e)`);
  return v;
}

// The environment of a server under test: quiet logs, and no API key from the developer's shell.
export function serverEnv(extra = {}) {
  const e = { ...process.env, DSINFER_LOG: process.env.DSINFER_LOG || 'warn', ...extra };
  delete e.DSINFER_API_KEY;
  return e;
}

// Starts `dsinfer <command> ...args` (serve, router, cluster); resolves once it printed its lines
// "dsinfer <command>: listening on URL" and "dsinfer <command>: ready". `env` extra environment
// variables, `launcher` a command line it is started through (e.g. ['prlimit', '--nofile=200', '--']).
export async function startDsinfer(command, args = [], { readyTimeoutMs = 300000, env: extraEnv = {}, launcher = [] } = {}) {
  const line = [...launcher, env('DSINFER_BIN'), command, ...args];
  const proc = spawn(line[0], line.slice(1), {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: serverEnv(extraEnv),
  });
  let out = '';
  let err = '';
  proc.stderr.on('data', (d) => { err += d; });
  const listening = new RegExp(`dsinfer ${command}: listening on (http:\\/\\/[0-9.:]+)`);
  const ready = new RegExp(`dsinfer ${command}: ready`);
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${command} not ready in time\nstdout:\n${out}\nstderr:\n${err}`)),
      readyTimeoutMs);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(listening);
      if (m && ready.test(out)) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${command} exited early (${code ?? signal})\nstdout:\n${out}\nstderr:\n${err}`));
    });
  });
  proc.removeAllListeners('exit');
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    url,
    port: Number(new URL(url).port),
    proc,
    stdout: () => out,
    stderr: () => err,
    exited,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode !== null) return { code: proc.exitCode, signal: null };
      proc.kill(signal);
      return exited;
    },
  };
}

// Starts `dsinfer serve` on the tiny model; `args` are extra flags, `options` as startDsinfer's.
export function startServer(args = [], options = {}) {
  return startDsinfer('serve', ['--model', env('DSINFER_E2E_MODEL'), '--port', '0', '--served-model-name', MODEL, ...args],
    options);
}

// The worker pool of a router (or cluster) at `url`: { prefill, decode, workers: [{ id, role, ... }] }.
export async function routerWorkers(url, headers = {}) {
  const r = await fetch(`${url}/internal/v1/workers`, { headers });
  assert.equal(r.status, 200);
  return r.json();
}

export async function metrics(server) {
  const r = await fetch(`${server.url}/metrics`);
  assert.equal(r.status, 200);
  return parseMetrics(await r.text());
}

// Prometheus text -> Map("name{labels}" -> value) plus helpers.
export function parseMetrics(text) {
  const values = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    values.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return {
    values,
    get(name, labels = {}) {
      let total = 0;
      let found = false;
      for (const [key, v] of values) {
        const m = key.match(/^([^{]+)(?:\{(.*)\})?$/);
        if (!m || m[1] !== name) continue;
        const have = Object.fromEntries([...(m[2] || '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
        if (Object.entries(labels).every(([k, want]) => have[k] === want)) { total += v; found = true; }
      }
      return found ? total : 0;
    },
  };
}

export async function waitFor(fn, { timeoutMs = 60000, intervalMs = 50, what = 'condition' } = {}) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out waiting for ${what}`);
}

// Sends raw bytes, returns everything the server sent until it closed (or `timeoutMs`).
export function rawExchange(port, chunks, { timeoutMs = 30000, delayMs = 0 } = {}) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let data = Buffer.alloc(0);
    let closed = false;
    const timer = setTimeout(() => { socket.destroy(); resolve({ data: data.toString('latin1'), closed: false }); }, timeoutMs);
    socket.on('data', (d) => { data = Buffer.concat([data, d]); });
    socket.on('error', () => {});
    socket.on('close', () => { closed = true; clearTimeout(timer); resolve({ data: data.toString('latin1'), closed }); });
    socket.on('connect', async () => {
      for (const c of chunks) {
        if (socket.destroyed) break;
        socket.write(c);
        if (delayMs) await new Promise((r) => setTimeout(r, delayMs));
      }
    });
  });
}

export function statusOf(raw) {
  const m = raw.match(/^HTTP\/1\.[01] (\d{3})/);
  return m ? Number(m[1]) : 0;
}

// One server for a whole test file, with the official OpenAI client on it: `file.server` and
// `file.client` are set before the first test; after the last one the server must exit with 0.
export function openaiServerForFile(args = [], { timeout = 120000 } = {}) {
  const file = { server: null, client: null };
  before(async () => {
    file.server = await startServer(args);
    const OpenAI = npm('openai');
    file.client = new OpenAI({ baseURL: `${file.server.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout });
  });
  after(async () => {
    const { code } = await file.server.stop();
    assert.equal(code, 0, `server exit code\n${file.server.stderr()}`);
  });
  return file;
}
