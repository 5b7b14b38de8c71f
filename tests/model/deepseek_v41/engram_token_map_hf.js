// The Engram compressed-token map (model-v41.md §5) computed with Hugging Face's own normalizers and
// decoder (npm `tokenizers`, the library the spec's known answers come from), independently of
// dsinfer's C++ derivation, which a test compares with this entry by entry.
// Usage: node engram_token_map_hf.js TOKENIZER_JSON OUT_JSON
// Writes {"compressed_vocab_size": N, "token_map": [...]} (the sidecar format) and prints N.
'use strict';
const fs = require('fs');
const path = require('path');

const npmRoot = process.env.DSINFER_NPM_DIR || path.join(__dirname, '..', '..', '..', '.cache', 'npm', 'node_modules');
const { Tokenizer } = require(path.join(npmRoot, 'tokenizers'));

// §5: NFKC -> NFD -> StripAccents -> Lowercase -> [ \t\r\n]+ to ' ' -> '^ $' to U+E000 -> Strip -> U+E000 to ' '.
function normalizer() {
  const config = {
    version: '1.0', truncation: null, padding: null, added_tokens: [],
    normalizer: {
      type: 'Sequence',
      normalizers: [
        { type: 'NFKC' }, { type: 'NFD' }, { type: 'StripAccents' }, { type: 'Lowercase' },
        { type: 'Replace', pattern: { Regex: '[ \\t\\r\\n]+' }, content: ' ' },
        { type: 'Replace', pattern: { Regex: '^ $' }, content: '\uE000' },
        { type: 'Strip', strip_left: true, strip_right: true },
        { type: 'Replace', pattern: { String: '\uE000' }, content: ' ' },
      ],
    },
    pre_tokenizer: null, post_processor: null, decoder: null,
    model: { type: 'WordLevel', vocab: { a: 0 }, unk_token: 'a' },
  };
  return Tokenizer.fromString(JSON.stringify(config)).getNormalizer();
}

async function main() {
  const [tokenizerPath, outPath] = process.argv.slice(2);
  if (!tokenizerPath || !outPath) throw new Error('usage: node engram_token_map_hf.js TOKENIZER_JSON OUT_JSON');
  const tok = Tokenizer.fromFile(tokenizerPath);
  const norm = normalizer();
  const n = tok.getVocabSize(true);
  const ids = new Map();
  const map = new Array(n);
  for (let t = 0; t < n; ++t) {
    const text = await tok.decode([t], false);
    let key;
    if (text.includes('\uFFFD')) {
      key = tok.idToToken(t);
    } else {
      key = norm.normalizeString(text);
      if (key === '') key = text;
    }
    if (!ids.has(key)) ids.set(key, ids.size);
    map[t] = ids.get(key);
  }
  fs.writeFileSync(outPath, JSON.stringify({ compressed_vocab_size: ids.size, token_map: map }));
  console.log(ids.size);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
