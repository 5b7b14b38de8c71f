// The persistent KV store across processes: two `dsinfer serve` on one store directory. A long prompt
// served by the first is a store hit on the second (cached tokens > 0, the same greedy answer), and a
// restarted process still hits. A process's SWA pool is its own, so these hits resume by bounded replay;
// bitwise equality with a pooled snapshot is checked in tests/engine (EngineV4KvStore).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MODEL, env, metrics, startServer, waitFor } from './harness.mjs';

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

// `dsinfer kvstore stat DIR`: records per traffic class.
function recordsOf(store) {
  const out = execFileSync(env('DSINFER_BIN'), ['kvstore', 'stat', store], { encoding: 'utf8' });
  const count = (cls) => Number((out.match(new RegExp(`${cls}\\s+records (\\d+)`)) || [0, 0])[1]);
  return { agent: count('agent'), chat: count('chat') };
}

test('the traffic class: the header, else agent for a request with tools, else chat', async () => {
  const store = fs.mkdtempSync(path.join(os.tmpdir(), 'dsinfer-kvstore-class-'));
  const server = await startServer(['--kv-store', store]);
  const chat = async (seed, tools, headers = {}) => {
    const body = {
      model: MODEL, max_tokens: 1, temperature: 0,
      // ~700 tokens of its own: full blocks to store, none shared with the other requests
      messages: [{ role: 'user', content: Array.from({ length: 350 }, (_, i) => `w${seed}x${i}`).join(' ') }],
    };
    if (tools) body.tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }];
    const r = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body),
    });
    assert.equal(r.status, 200, await r.clone().text());
    return r.json();
  };
  try {
    // Every block the engine handed to the store (saved) has been written (or was already there).
    let saved = 0;
    const settle = async (what) => {
      let seen = {};
      try {
        await waitFor(async () => {
          const m = await metrics(server);
          const get = (name) => m.get(`dsinfer_engine_kv_store_${name}`);
          seen = Object.fromEntries(['blocks_saved_total', 'records_written_total', 'writes_existing_total',
            'dropped_writes_total', 'dropped_disabled_total', 'write_errors_total', 'save_failures_total']
            .map((k) => [k, get(k)]));
          const now = seen.blocks_saved_total;
          const done = seen.records_written_total + seen.writes_existing_total;
          if (now > saved && done === now) { saved = now; return true; }
          return false;
        }, { what });
      } catch (e) {
        // Which of "not handed over", "dropped" or "failed" it was (the wait alone cannot tell).
        throw new Error(`${e.message}: ${JSON.stringify(seen)}\nserver stderr:\n${server.stderr().slice(-4000)}`);
      }
    };
    await chat(1, false);
    await settle('the chat request stored');
    const afterChat = recordsOf(store);
    assert.ok(afterChat.chat > 0 && afterChat.agent === 0, JSON.stringify(afterChat));
    await chat(2, true);
    await settle('the request with tools stored');
    const afterTools = recordsOf(store);
    assert.ok(afterTools.agent > 0 && afterTools.chat === afterChat.chat, JSON.stringify(afterTools));
    await chat(3, true, { 'x-dsinfer-traffic-class': 'chat' });  // the header wins
    await settle('the request with a header stored');
    const afterHeader = recordsOf(store);
    assert.ok(afterHeader.chat > afterChat.chat && afterHeader.agent === afterTools.agent, JSON.stringify(afterHeader));
  } finally {
    await server.stop();
    fs.rmSync(store, { recursive: true, force: true });
  }
});
