// HTTP security and conformance against the real server (issue 9): authentication before routing
// under /v1/, the Bearer scheme in any case, percent-encoded model ids, HEAD without a body,
// absolute-form targets, Host and Transfer-Encoding rules, request bodies with very wide objects
// (parsed in linear time), and API keys refused at start.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { startServer, MODEL, rawExchange, statusOf, env, serverEnv } from './harness.mjs';

const KEY = 'sk-security';
const SLASHED = 'org/tiny e2e';
let server;
before(async () => {
  server = await startServer(['--api-key', KEY, '--served-model-name', `${MODEL},${SLASHED}`]);
});
after(async () => {
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr());
});

const get = (path, headers = {}) => fetch(`${server.url}${path}`, { headers });
const auth = { authorization: `Bearer ${KEY}` };

test('an unknown path under /v1/ needs the key before it is a 404', async () => {
  assert.equal((await get('/v1/no-such-route')).status, 401);
  assert.equal((await get('/v1/no-such-route', { authorization: 'Bearer wrong' })).status, 401);
  assert.equal((await get('/v1/no-such-route', auth)).status, 404);
  assert.equal((await get('/no-such-route')).status, 404, 'outside /v1/ nothing is protected');
  assert.equal((await get('/health')).status, 200);
});

test('the Bearer scheme is case-insensitive', async () => {
  for (const scheme of ['Bearer', 'bearer', 'BEARER', 'bEaReR']) {
    assert.equal((await get('/v1/models', { authorization: `${scheme} ${KEY}` })).status, 200, scheme);
  }
  assert.equal((await get('/v1/models', { authorization: `Bearer  ${KEY}` })).status, 200, 'several spaces');
  assert.equal((await get('/v1/models', { authorization: `Basic ${KEY}` })).status, 401);
  assert.equal((await get('/v1/models', { authorization: `Bearer${KEY}` })).status, 401);
});

test('a model id in the path is percent-decoded', async () => {
  const r = await get(`/v1/models/${encodeURIComponent(SLASHED)}`, auth);
  assert.equal(r.status, 200);
  assert.equal((await r.json()).id, SLASHED);
  assert.equal((await get(`/v1/models/${MODEL}`, auth)).status, 200);
  assert.equal((await get('/v1/models/org%2', auth)).status, 400, 'a truncated escape');
  assert.equal((await get('/v1/models/other', auth)).status, 404);
});

test('a HEAD response has no body, so a pipelined request after it is read in step', async () => {
  const { data } = await rawExchange(server.port, [
    'HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']);
  const responses = data.split(/(?=HTTP\/1\.1 )/);
  assert.equal(responses.length, 2, data);
  assert.match(responses[0], /^HTTP\/1\.1 200 /);
  assert.match(responses[0], /Content-Length: 15\r\n/i);
  assert.ok(responses[0].endsWith('\r\n\r\n'), 'no body after the HEAD response head');
  assert.ok(responses[1].endsWith('{"status":"ok"}'));
});

test('an absolute-form target is routed by its path', async () => {
  const { data } = await rawExchange(server.port, [
    `GET http://127.0.0.1:${server.port}/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`]);
  assert.equal(statusOf(data), 200, data);
  assert.ok(data.endsWith('{"status":"ok"}'));
});

test('a missing or repeated Host is a 400', async () => {
  for (const head of ['GET /health HTTP/1.1\r\n\r\n', 'GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n']) {
    const { data, closed } = await rawExchange(server.port, [head]);
    assert.equal(statusOf(data), 400, data);
    assert.ok(closed);
  }
});

test('framing a proxy could read differently is refused and the connection closed', async () => {
  const body = JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'x' }] });
  const smuggled = 'GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n';
  for (const te of ['xchunked', 'identity', 'chunked, identity']) {
    const { data, closed } = await rawExchange(server.port, [
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${body.length}\r\nTransfer-Encoding: ${te}\r\n\r\n${body}${smuggled}`]);
    assert.equal(statusOf(data), 400, `${te}: ${data}`);
    assert.equal(data.match(/HTTP\/1\.1 /g).length, 1, `${te}: nothing after the 400`);
    assert.ok(closed, te);
  }
  const { data } = await rawExchange(server.port, [
    'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n']);
  assert.equal(statusOf(data), 501, data);
});

test('a body with an object of 100k keys is parsed like any other (linear parse), and a 300-entry logit_bias works', async () => {
  const fields = Array.from({ length: 100000 }, (_, i) => `"k${i}":${i}`).join(',');
  const body = `{"model":"${MODEL}","max_tokens":1,"messages":[{"role":"user","content":"x"}],"metadata":{${fields}}}`;
  assert.ok(body.length > 1000000);
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...auth }, body });
  const text = await r.text();
  // Whatever the API makes of such metadata, it is not a refusal of the JSON itself.
  assert.doesNotMatch(text, /invalid_json|more than \d+ keys/, text.slice(0, 300));
  const bias = Object.fromEntries(Array.from({ length: 300 }, (_, i) => [String(i + 10), -1]));
  const ok = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify({ model: MODEL, max_tokens: 2, logit_bias: bias, messages: [{ role: 'user', content: 'x' }] }) });
  assert.equal(ok.status, 200, await ok.clone().text());
  assert.equal((await ok.json()).object, 'chat.completion');
});

// Chunked framing is bounded before authentication (no key is sent: the answer is a 400, not a 401): a
// chunk-size line that never ends, a trailer section without end, a size padded with a million zeros.
test('chunk lines, trailers and padded sizes are bounded before authentication: 400 and close', async () => {
  const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n';
  const cases = {
    'an endless chunk extension': [head, `5;ext=${'e'.repeat(1 << 20)}`],
    'an endless trailer section': [head, '0\r\n', ...Array.from({ length: 256 }, (_, i) => `X-T${i}: ${'t'.repeat(1024)}\r\n`)],
    'a size padded with a million zeros': [head, `${'0'.repeat(1 << 20)}1\r\na\r\n0\r\n\r\n`],
  };
  for (const [what, chunks] of Object.entries(cases)) {
    const { data, closed } = await rawExchange(server.port, chunks);
    assert.equal(statusOf(data), 400, `${what}: ${data.slice(0, 300)}`);
    assert.ok(closed, `${what}: the connection is closed`);
  }
  assert.equal((await get('/health')).status, 200);
});

// What a client reads never names the libraries underneath (nlohmann's "[json.exception...]" tags,
// C++ type names): bad JSON and a schema of the wrong shape, on both protocols.
test('error messages carry no library exception text', async () => {
  const leaks = /json\.exception|nlohmann|std::|basic_string|what\(\)/;
  const badJson = ['{"model":', '[1', '{"a":"\\ud800"}', `{"model":"${MODEL}","messages":[1,]}`];
  const badSchemas = [JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 5 } } } }),
    JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'x' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { properties: [1] } } } })];
  for (const [path, bodies] of [['/v1/chat/completions', [...badJson, ...badSchemas]], ['/v1/messages', badJson]]) {
    for (const body of bodies) {
      const r = await fetch(`${server.url}${path}`, {
        method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...auth }, body });
      const text = await r.text();
      assert.equal(r.status, 400, `${path} ${body}: ${text}`);
      assert.doesNotMatch(text, leaks, `${path} ${body}`);
    }
  }
});

// `dsinfer serve` with this key and environment: its exit code and stderr (it stops before loading).
function serveWith(args, extraEnv = {}) {
  return new Promise((resolve, reject) => {
    const e = { ...serverEnv(), ...extraEnv };
    const proc = spawn(env('DSINFER_BIN'), ['serve', '--model', env('DSINFER_E2E_MODEL'), '--port', '0', ...args],
                       { env: e, stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    let out = '';
    proc.stderr.on('data', (d) => { err += d; });
    proc.stdout.on('data', (d) => {
      out += d;
      if (/\bready\b/.test(out)) proc.kill('SIGKILL');  // it should not have started
    });
    proc.on('error', reject);
    proc.on('exit', (code, signal) => resolve({ code, signal, err, out }));
  });
}

test('an empty or whitespace-padded API key is refused at start', async () => {
  for (const [args, extra, what] of [
    [['--api-key', ''], {}, '--api-key'],
    [['--api-key', ''], { DSINFER_API_KEY: 'set' }, '--api-key'],
    [['--api-key', ' k '], {}, '--api-key'],
    [[], { DSINFER_API_KEY: '' }, 'DSINFER_API_KEY'],
    [[], { DSINFER_API_KEY: 'k\t' }, 'DSINFER_API_KEY'],
  ]) {
    const r = await serveWith(args, extra);
    assert.equal(r.signal, null, `${JSON.stringify(args)} ${JSON.stringify(extra)} started: ${r.out}`);
    assert.notEqual(r.code, 0);
    assert.ok(r.err.includes(what), r.err);
  }
});
