// Encode throughput of Hugging Face tokenizers (the npm `tokenizers` package, Rust core) on a text
// file, for comparison with `dsinfer bench-tokenizer` on the same file.
// Usage: node hf_tokenizers_bench.js TOKENIZER_JSON TEXT_FILE [REPEAT]
'use strict';
const fs = require('fs');
const path = require('path');

const npmRoot = process.env.DSINFER_NPM_DIR || path.join(__dirname, '..', '..', '.cache', 'npm', 'node_modules');
const { Tokenizer } = require(path.join(npmRoot, 'tokenizers'));

async function main() {
  const [tokPath, textPath, repeatArg] = process.argv.slice(2);
  if (!tokPath || !textPath) {
    console.error('usage: node hf_tokenizers_bench.js TOKENIZER_JSON TEXT_FILE [REPEAT]');
    process.exit(2);
  }
  const repeat = Math.max(1, parseInt(repeatArg || '5', 10));
  const text = fs.readFileSync(textPath, 'utf8');
  const mb = Buffer.byteLength(text, 'utf8') / 1e6;
  const tok = Tokenizer.fromFile(tokPath);
  const opts = { addSpecialTokens: false };
  const warm = await tok.encode(text, null, opts);  // warm-up, fills the BPE cache
  const n = warm.getIds().length;
  const rates = [];
  for (let r = 0; r < repeat; ++r) {
    const t0 = process.hrtime.bigint();
    const e = await tok.encode(text, null, opts);
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    if (e.getIds().length !== n) throw new Error('different lengths across runs');
    rates.push(mb / s);
  }
  rates.sort((a, b) => a - b);
  const median = rates[Math.floor(rates.length / 2)];
  console.log(`hf tokenizers (node), ${n} ids: ${median.toFixed(2)} MB/s`);
  console.log(JSON.stringify({ hf_mb_per_s: median, ids: n }));
}

main().catch((e) => { console.error(e); process.exit(1); });
