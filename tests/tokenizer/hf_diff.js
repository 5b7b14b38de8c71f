// Differential test against Hugging Face tokenizers (npm `tokenizers`, the version the shared cases
// were generated with): random texts must encode to the same ids (with and without added-token
// recognition being HF's plain encode) and random id lists must decode to the same text.
// Usage: node hf_diff.js CLI_BINARY V3_BASE_JSON [N]
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');

const npmRoot = process.env.DSINFER_NPM_DIR || path.join(__dirname, '..', '..', '.cache', 'npm', 'node_modules');
const { Tokenizer } = require(path.join(npmRoot, 'tokenizers'));

// mulberry32: deterministic across machines.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const units = [
  'a', 'b', 'Z', 'hello', ' world', 'The', 'e\u0301', 'ß', 'Ω', 'д', 'ا', 'ก', 'ᄀ', '1', '23', '456', '7890', '٣',
  '½', 'Ⅷ', '²', '中', '文', '测试', '〇', 'の', 'カ', 'ー', '・', 'ﾅ', '한', '𝕳', '😀', '👍🏽', '👨\u200d👩', '☺️', '🇯🇵',
  ' ', '  ', '\t', '\n', '\n\n', '\r\n', '\r', '\u00a0', '\u3000', '\u2003', '\u202f', '\u205f', '\u180e', '\u2028',
  '\u2029', '\u0085', '\u000b', '\u000c', '\u001c', '\u007f', '\u0001', '\u0000', '\u200d', '\u200b', '\u202e',
  '\ufeff', '\u0300', '\u20dd', '.', ',', '!', '?', "'", '"', '(', ')', '{', '}', '[', ']', '<', '>', '/', '\\', '-',
  '_', '=', '+', '*', '#', '@', '$', '%', '&', '|', '~', '`', '^', ';', ':', '，', '。', '「', '」', '—', '…', '｜',
  '€', '©', '°', '±', '\ud800\udc00', '\uffff', '\ufffd', 'ǅ', 'ʰ', '々', '〆', '㐀', '\u{20000}', '\u{e0001}',
  '<｜User｜>', '<｜Assistant｜>', '<｜System｜>', '<think>', '</think>', '｜DSML｜', '<｜image｜>',
  '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜place▁holder▁no▁0｜>', '<｜table｜>', '<|EOT|>',
  '<|place_holder_mm_span_0439|>', '<｜DSML｜ calls>', '<｜latest_reminder｜>', '<｜fim▁hole｜>', '<｜action｜>',
  '<｜safety｜>', '<dsml:', '</dsml:', '<｜end_of_query｜>', '<|place_holder_mm_span_0100|>', '<｜box｜>',
];

async function main() {
  const [cli, base, nArg] = process.argv.slice(2);
  const n = parseInt(nArg || '3000', 10);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsinfer_hf_diff_'));
  let failures = 0;
  for (const version of ['v41', 'v4']) {
    execFileSync(cli, ['mktokenizer', '--base', base, '--version', version, '--out', path.join(dir, version)]);
    const file = path.join(dir, version, 'tokenizer.json');
    const hf = Tokenizer.fromFile(file);
    const r = rng(version === 'v41' ? 41 : 4);
    const texts = [];
    for (let i = 0; i < n; ++i) {
      let s = '';
      const len = 1 + Math.floor(r() * (i % 10 === 0 ? 400 : 40));
      for (let k = 0; k < len; ++k) s += units[Math.floor(r() * units.length)];
      texts.push(s);
    }
    const idLists = [];
    for (let i = 0; i < n; ++i) {
      const ids = [];
      const len = Math.floor(r() * 20);
      for (let k = 0; k < len; ++k) ids.push(r() < 0.5 ? Math.floor(r() * 300) : Math.floor(r() * 129280));
      idLists.push(ids);
    }
    const encOut = execFileSync(cli, ['tokenize', '--tokenizer', file],
                                { input: texts.map((t) => JSON.stringify({ text: t })).join('\n') + '\n', maxBuffer: 1 << 30 })
      .toString().trim().split('\n');
    for (const skip of [false, true]) {
      const decOut = execFileSync(cli, ['tokenize', '--decode', '--tokenizer', file].concat(skip ? ['--skip-special-tokens'] : []),
                                  { input: idLists.map((ids) => JSON.stringify({ ids })).join('\n') + '\n', maxBuffer: 1 << 30 })
        .toString().trim().split('\n');
      for (let i = 0; i < n; ++i) {
        const want = await hf.decode(idLists[i], skip);
        const got = JSON.parse(decOut[i]).text;
        if (got !== want) {
          if (++failures <= 10) console.log(`${version} decode(skip=${skip}) ${JSON.stringify(idLists[i])}: ${JSON.stringify(got)} != HF ${JSON.stringify(want)}`);
        }
      }
    }
    for (let i = 0; i < n; ++i) {
      const want = Array.from((await hf.encode(texts[i], null, { addSpecialTokens: false })).getIds());
      const got = JSON.parse(encOut[i]).ids;
      if (JSON.stringify(got) !== JSON.stringify(want)) {
        if (++failures <= 10) console.log(`${version} encode ${JSON.stringify(texts[i])}: ${JSON.stringify(got)} != HF ${JSON.stringify(want)}`);
      }
    }
    console.log(`${version}: ${n} texts and ${2 * n} id lists compared`);
  }
  fs.rmSync(dir, { recursive: true, force: true });
  console.log(`${failures === 0 ? 1 : 0} passed, ${failures === 0 ? 0 : 1} failed`);
  process.exit(failures === 0 ? 0 : 1);
}

main().catch((e) => { console.error(e); process.exit(1); });
