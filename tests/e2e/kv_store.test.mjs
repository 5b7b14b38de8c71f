// The persistent KV store across processes: two `dsinfer serve` on one store directory. A long prompt
// served by the first is a store hit on the second (cached tokens > 0, the same greedy answer), and a
// restarted process still hits. A process's SWA pool is its own, so these hits resume by bounded replay;
// bitwise equality with a pooled snapshot is checked in tests/engine (EngineV4KvStore).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MODEL, metrics, startServer, waitFor } from './harness.mjs';

// 600 token ids: 4 full 128-token blocks that can end a resume ((600 - 1) / 128).
const PROMPT = Array.from({ length: 600 }, (_, i) => 1000 + ((i * 7919) % 20000));
const BLOCKS = 4;

async function complete(server, extraHeaders = {}) {
  const r = await fetch(`${server.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...extraHeaders },
    body: JSON.stringify({ model: MODEL, prompt: PROMPT, max_tokens: 1, temperature: 0, seed: 1 }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  return r.json();
}

test('two serve processes share one KV store directory; a restarted one still hits', async () => {
  const store = fs.mkdtempSync(path.join(os.tmpdir(), 'dsinfer-kvstore-e2e-'));
  const flags = ['--kv-store', store];
  const first = await startServer(flags);
  let second;
  try {
    const cold = await complete(first, { 'x-dsinfer-traffic-class': 'agent' });
    assert.equal(cold.usage.prompt_tokens_details.cached_tokens, 0);
    // Write-behind: the records land shortly after the answer.
    await waitFor(async () => (await metrics(first)).get('dsinfer_engine_kv_store_records_written_total') >= BLOCKS,
                  { what: 'the prompt blocks written to the store' });
    second = await startServer(flags);
    const hit = await complete(second);
    assert.ok(hit.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(hit.usage));
    assert.equal(hit.usage.prompt_cache_hit_tokens, hit.usage.prompt_tokens_details.cached_tokens);
    assert.equal(hit.choices[0].text, cold.choices[0].text);
    const m = await metrics(second);
    assert.ok(m.get('dsinfer_engine_kv_store_hits_total') >= BLOCKS);
    assert.ok(m.get('dsinfer_engine_kv_store_read_bytes_total') > 0);
    await second.stop();

    // A new process on the same directory: nothing in its memory, the store still answers.
    second = await startServer(flags);
    const again = await complete(second);
    assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(again.usage));
    assert.equal(again.choices[0].text, cold.choices[0].text);

    const bad = await fetch(`${second.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-dsinfer-traffic-class': 'batch' },
      body: JSON.stringify({ model: MODEL, prompt: 'hi', max_tokens: 1 }),
    });
    assert.equal(bad.status, 400);
  } finally {
    await first.stop();
    if (second) await second.stop();
    fs.rmSync(store, { recursive: true, force: true });
  }
});
