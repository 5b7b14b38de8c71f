// Nothing a finished request owned stays alive: after bursts of concurrent requests with large bodies the
// server's resident memory returns to where it was, while idle, with no further traffic to flush it.
// glibc's malloc is pinned to mmap every allocation of 128 KiB or more (MALLOC_MMAP_THRESHOLD_), so freed
// bodies go back to the kernel at once: what stays resident is what the server still holds, not what the
// allocator caches.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { startServer, MODEL } from './harness.mjs';

const rssBytes = (pid) => {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  assert.ok(m, 'VmRSS in /proc/<pid>/status');
  return Number(m[1]) * 1024;
};

async function burst(url, count, bodyBytes) {
  // An ignored string field makes the body large; the request itself is one token of generation.
  const body = JSON.stringify({ model: MODEL, max_tokens: 1, thinking: { type: 'disabled' }, user: 'x'.repeat(bodyBytes),
    messages: [{ role: 'user', content: 'Hi.' }] });
  const rs = await Promise.all(Array.from({ length: count }, () => fetch(`${url}/v1/chat/completions`,
    { method: 'POST', headers: { 'content-type': 'application/json' }, body }).then(async (r) => [r.status, await r.text()])));
  for (const [status, text] of rs) assert.equal(status, 200, text.slice(0, 300));
}

test('RSS returns to its baseline after 1,000 requests with large bodies', async () => {
  const mib = 1 << 20;
  const server = await startServer(['--max-body-bytes', String(16 * mib)],
    { env: { MALLOC_MMAP_THRESHOLD_: String(128 * 1024) } });
  try {
    // Warm-up at the same concurrency with small bodies (thread pools, first-use allocations): the
    // baseline holds no large body, so a server that keeps the last burst's requests fails below.
    await burst(server.url, 100, 1024);
    const baseline = rssBytes(server.proc.pid);
    for (let round = 0; round < 10; ++round) await burst(server.url, 100, mib / 4);  // 1,000 requests, 256 MB
    const after = rssBytes(server.proc.pid);
    console.log(`RSS baseline ${(baseline / mib).toFixed(1)} MiB, after 1,000 requests ${(after / mib).toFixed(1)} MiB`);
    // Holding the bodies of the last burst alone would be 100 x 256 KiB (and each is held at least twice:
    // raw and parsed); what may remain is far below one body per request of a burst.
    assert.ok(after - baseline < 32 * mib,
      `RSS grew by ${((after - baseline) / mib).toFixed(1)} MiB (baseline ${(baseline / mib).toFixed(1)} MiB)`);
  } finally {
    const { code } = await server.stop();
    assert.equal(code, 0, server.stderr());
  }
});
