// `dsinfer router` on a V4.1 model directory (config.json and tokenizer.json of the tiny V4.1 checkpoint,
// no weights): without --prompt-version it renders with the template of the model's architecture, as
// `dsinfer serve` does on the same checkpoint, and without tokenizer.json it takes V4.1's. Rendering happens at the router, so a V4 template there
// would send every worker a prompt the V4.1 model was not trained on.
import { spawn } from 'node:child_process';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, before, after } from 'node:test';
import { env, serverEnv, startServer, MODEL } from './harness.mjs';

let dir;
let router;
let serve;

function startRouter(args, modelDir = dir) {
  const proc = spawn(env('DSINFER_BIN'), ['router', '--model', modelDir, '--port', '0', '--served-model-name', MODEL, ...args],
    { stdio: ['ignore', 'pipe', 'pipe'], env: serverEnv() });
  let out = '';
  let err = '';
  proc.stderr.on('data', (d) => { err += d; });
  let ready = false;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`router not ready\n${out}\n${err}`)), 120000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[0-9.:]+)/);
      if (!ready && m && /dsinfer router: ready/.test(out)) {
        ready = true;  // later output (the shutdown lines) must not replace the exit listener
        clearTimeout(timer);
        proc.removeAllListeners('exit');
        const exited = new Promise((done) => proc.on('exit', (code) => done(code)));
        resolve({ url: m[1], stop: () => { proc.kill('SIGTERM'); return exited; } });
      }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`router exited (${code})\n${out}\n${err}`)); });
  });
}

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsinfer-router-v41-'));
  for (const f of ['config.json', 'tokenizer.json']) fs.copyFileSync(path.join(env('DSINFER_E2E_MODEL'), f), path.join(dir, f));
  assert.match(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'), /DeepseekV41ForCausalLM/);
  router = await startRouter([]);
  serve = await startServer([]);
});

after(async () => {
  assert.equal(await router.stop(), 0);
  assert.equal((await serve.stop()).code, 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

async function countTokens(server, body) {
  const r = await fetch(`${server.url}/v1/messages/count_tokens`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, max_tokens: 16, ...body }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  return (await r.json()).input_tokens;
}

// Thinking on (the default) renders differently under the two templates (V4.1's one-line effort prefix
// against V4's paragraph), and so does a system turn after the first user turn (V4.1 has <｜System｜>).
const bodies = [
  { messages: [{ role: 'user', content: 'Why?' }] },
  { messages: [{ role: 'user', content: 'Why?' }], thinking: { type: 'disabled' }, system: 'Be brief.' },
];

test('the router renders a V4.1 model with the V4.1 template, as serve does', async () => {
  for (const body of bodies) assert.equal(await countTokens(router, body), await countTokens(serve, body));
});

test('--prompt-version still overrides the architecture at the router', async () => {
  const v4 = await startRouter(['--prompt-version', 'v4']);
  try {
    const body = bodies[0];
    assert.notEqual(await countTokens(v4, body), await countTokens(serve, body));
  } finally {
    assert.equal(await v4.stop(), 0);
  }
});

// A model directory without tokenizer.json: the router falls back to the built tokenizer of the model's
// architecture (V4.1's here; before, always V4's, which lacks <｜System｜> and stopped the start).
test('without tokenizer.json the router uses the V4.1 tokenizer of a V4.1 model', async () => {
  const bare = fs.mkdtempSync(path.join(os.tmpdir(), 'dsinfer-router-v41-bare-'));
  fs.copyFileSync(path.join(env('DSINFER_E2E_MODEL'), 'config.json'), path.join(bare, 'config.json'));
  try {
    const r = await startRouter([], bare);
    try {
      for (const body of bodies) assert.equal(await countTokens(r, body), await countTokens(serve, body));
    } finally {
      assert.equal(await r.stop(), 0);
    }
  } finally {
    fs.rmSync(bare, { recursive: true, force: true });
  }
});
