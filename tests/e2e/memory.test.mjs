// Nothing a finished request owned stays alive: after bursts of concurrent requests with large bodies the
// server's resident memory returns to where it was, while idle, with no further traffic to flush it.
// glibc's malloc is pinned to mmap every allocation of 128 KiB or more (MALLOC_MMAP_THRESHOLD_), so freed
// bodies go back to the kernel at once, and to trim free heap tops of 128 KiB or more (MALLOC_TRIM_THRESHOLD_,
// glibc's default): dsinfer otherwise keeps up to 256 MiB of freed heap for its step buffers
// (core/malloc_tuning), and the growing parse buffers of 100 concurrent bodies would stay cached there by
// chance (50.8 MiB once, failing). What stays resident is then what the server still holds, not what the
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
    { env: { MALLOC_MMAP_THRESHOLD_: String(128 * 1024), MALLOC_TRIM_THRESHOLD_: String(128 * 1024) } });
  try {
    // Warm-up (thread pools, first-use allocations, the per-thread malloc arenas that large bodies are
    // parsed in): one burst with the large bodies, then one with small bodies, so the baseline holds no
    // large body and a server that keeps the last burst's requests fails below. Without the large burst
    // the baseline sometimes lacked an arena that the later rounds create (201 MiB against 232-249 after).
    await burst(server.url, 100, mib / 4);
    await burst(server.url, 100, 1024);
    const baseline = rssBytes(server.proc.pid);
    // 1,000 requests, 256 MB. The RSS after a round moves by +-15 MiB from round to round without a trend
    // (freed small blocks pinned in the arenas, measured with /proc/<pid>/smaps), so the rounds' lowest
    // reading of the last three is compared: holding the bodies of its last burst, or leaking a body per
    // request (175 MB by then), raises every round's.
    const rounds = [];
    for (let round = 0; round < 10; ++round) {
      await burst(server.url, 100, mib / 4);
      rounds.push(rssBytes(server.proc.pid));
    }
    const lastThree = Math.min(...rounds.slice(-3));
    console.log(`RSS baseline ${(baseline / mib).toFixed(1)} MiB, after each round ` +
      `${rounds.map((r) => (r / mib).toFixed(1)).join(' ')} MiB`);
    // Holding the bodies of the last burst alone would be 100 x 256 KiB (and each is held at least twice:
    // raw and parsed); what may remain is far below one body per request of a burst.
    assert.ok(lastThree - baseline < 32 * mib,
      `RSS grew by ${((lastThree - baseline) / mib).toFixed(1)} MiB (baseline ${(baseline / mib).toFixed(1)} MiB)`);
  } finally {
    const { code } = await server.stop();
    assert.equal(code, 0, server.stderr());
  }
});
