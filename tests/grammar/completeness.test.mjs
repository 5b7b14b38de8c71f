// Completeness of the grammar engine: valid instances of a schema corpus (npm json-schema-faker, which
// knows nothing of our grammars) and strings of regexes (npm randexp), each first confirmed by an
// independent validator (ajv + ajv-formats; the regex itself), are accepted token by token by the
// matcher over the V4 vocabulary, every token in its step's mask, end of text allowed after them
// (tests/grammar/grammar_accepts.cpp does the matching). Generation is seeded: the same cases every run.
// The instances are compact JSON with properties in schema order, the whitespace and order policy the
// grammar enforces (src/grammar/README.md): the corpus sets no additionalProperties beside listed
// properties, which json-schema-faker never fills anyway.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { sharedSchemas } from './schema_corpus.mjs';

const require = createRequire(import.meta.url);
const nodePaths = (process.env.NODE_PATH ?? '').split(path.delimiter).filter(Boolean);
function npm(name) {
  try {
    const m = require(name);
    return m.default ?? m;
  } catch (e) {
    throw new Error(`npm package ${name} not found (NODE_PATH=${process.env.NODE_PATH}); run scripts/setup.sh: ${e.message}`);
  }
}
// json-schema-faker is an ES module only, and ES imports ignore NODE_PATH: import its entry by path.
async function npmModule(name, entry) {
  for (const dir of nodePaths) {
    const file = path.join(dir, name, entry);
    if (existsSync(file)) return import(pathToFileURL(file).href);
  }
  throw new Error(`npm package ${name} not found (NODE_PATH=${process.env.NODE_PATH}); run scripts/setup.sh`);
}

const Ajv2020 = npm('ajv/dist/2020');
const addFormats = npm('ajv-formats');
const RandExp = npm('randexp');
const { generateSync } = await npmModule('json-schema-faker', 'dist/index.js');
const tool = process.env.GRAMMAR_ACCEPTS;

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

// The features of src/grammar/README.md "JSON Schema", nesting, recursion, and real-world API shapes.
const schemas = {
  ...sharedSchemas,
  tree: { $defs: { node: { type: 'object', properties: { label: { type: 'string', maxLength: 12 },
    children: { type: 'array', maxItems: 3, items: { $ref: '#/$defs/node' } } }, required: ['label'] } },
    $ref: '#/$defs/node' },
  formats: { type: 'object', properties: {
    at: { type: 'string', format: 'date-time' }, day: { type: 'string', format: 'date' },
    clock: { type: 'string', format: 'time' }, mail: { type: 'string', format: 'email' },
    ip: { type: 'string', format: 'ipv4' }, link: { type: 'string', format: 'uri' },
    uid: { type: 'string', format: 'uuid' } },
    required: ['at', 'day', 'clock', 'mail', 'ip', 'link', 'uid'] },
  numbers: { type: 'object', properties: {
    any: { type: 'number' }, int: { type: 'integer' }, small: { type: 'integer', exclusiveMinimum: -10, exclusiveMaximum: 1000 },
    price: { type: 'number', minimum: 0, maximum: 5000 }, big: { type: 'integer', minimum: 1000000, maximum: 9007199254740991 } },
    required: ['any', 'int', 'small', 'price', 'big'] },
  strings: { type: 'object', properties: {
    free: { type: 'string' }, short: { type: 'string', minLength: 2, maxLength: 6 },
    exact: { type: 'string', minLength: 3, maxLength: 3 }, anyv: {}, nullable: { type: ['string', 'null'] } },
    required: ['free', 'short', 'exact', 'anyv', 'nullable'] },
  enums: { type: 'array', items: { enum: [1, 'two', null, true, { a: [1, { b: 'c' }] }, 2.5] }, minItems: 1, maxItems: 5 },
  tuple: { type: 'array', prefixItems: [{ type: 'string', maxLength: 5 }, { type: 'integer', minimum: 0, maximum: 99 },
    { const: 'end' }], items: false, minItems: 3 },
  oneof: { oneOf: [{ type: 'object', properties: { kind: { const: 'circle' }, r: { type: 'integer', minimum: 1, maximum: 9 } },
    required: ['kind', 'r'] }, { type: 'object', properties: { kind: { const: 'square' }, side: { type: 'integer', minimum: 1,
    maximum: 9 } }, required: ['kind', 'side'] }] },
  map: { type: 'object', additionalProperties: { type: 'integer', minimum: 0, maximum: 100 } },
  weather_tool: { type: 'object', properties: {
    location: { type: 'string', description: 'City and country' }, unit: { enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer', minimum: 1, maximum: 14 } }, required: ['location', 'unit'], additionalProperties: false },
  github_issue: { type: 'object', properties: {
    title: { type: 'string', minLength: 1, maxLength: 80 }, body: { type: ['string', 'null'] },
    labels: { type: 'array', items: { type: 'string', maxLength: 20 }, maxItems: 5 },
    assignees: { type: 'array', items: { type: 'string', pattern: '^[a-z][a-z0-9-]{0,15}$' }, maxItems: 3 },
    milestone: { type: ['integer', 'null'], minimum: 1 }, state: { enum: ['open', 'closed'] } },
    required: ['title', 'labels', 'state'], additionalProperties: false },
  order: { type: 'object', properties: {
    order_id: { type: 'string', pattern: '^ORD-[0-9]{6}$' }, placed: { type: 'string', format: 'date-time' },
    lines: { type: 'array', minItems: 1, maxItems: 4, items: { type: 'object', properties: {
      sku: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{4}$' }, qty: { type: 'integer', minimum: 1, maximum: 99 },
      unit_price: { type: 'number', minimum: 0 } }, required: ['sku', 'qty', 'unit_price'], additionalProperties: false } },
    shipping: { $ref: '#/$defs/address' }, gift: { type: 'boolean' } },
    required: ['order_id', 'placed', 'lines', 'shipping'], additionalProperties: false,
    $defs: { address: { type: 'object', properties: { street: { type: 'string', maxLength: 40 },
      city: { type: 'string', maxLength: 30 }, zip: { type: 'string', pattern: '^[0-9]{5}(-[0-9]{4})?$' },
      country: { enum: ['US', 'CA', 'MX'] } }, required: ['street', 'city', 'zip', 'country'], additionalProperties: false } } },
  calendar_event: { type: 'object', properties: {
    summary: { type: 'string', maxLength: 60 }, start: { type: 'string', format: 'date-time' },
    end: { type: 'string', format: 'date-time' }, attendees: { type: 'array', maxItems: 4, items: { type: 'object',
      properties: { email: { type: 'string', format: 'email' }, optional: { type: 'boolean' } }, required: ['email'] } },
    recurrence: { anyOf: [{ type: 'null' }, { enum: ['daily', 'weekly', 'monthly'] }] } },
    required: ['summary', 'start', 'end'] },
};

// Regexes of the `regex` request field (and of `pattern`): whole-output matches.
const regexes = [
  '[A-Z]{3}-\\d{2,4}',
  '(foo|bar)+baz?',
  '\\d{4}-\\d{2}-\\d{2}',
  '[a-z0-9._%+-]{1,12}@[a-z0-9-]{1,10}\\.[a-z]{2,4}',
  '(\\+1 )?\\(\\d{3}\\) \\d{3}-\\d{4}',
  '(?:yes|no|maybe)',
  '[^\\n"]{0,20}',
  '\\w+(\\s\\w+){0,4}\\.',
  '(0|[1-9][0-9]*)(\\.[0-9]{1,3})?',
  '#[0-9a-fA-F]{6}',
];

// Deterministic uniform draws (mulberry32) for randexp.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function accepts(cases) {
  assert.ok(tool, 'GRAMMAR_ACCEPTS (the grammar_accepts tool) is not set: run through ctest');
  const input = cases.map((c) => JSON.stringify({ kind: c.kind, source: c.source, text: c.text, compare: c.compare }))
    .join('\n') + '\n';
  const r = spawnSync(tool, [], { input, encoding: 'utf8', maxBuffer: 1 << 26 });
  assert.equal(r.status, 0, `grammar_accepts failed: ${r.stderr}`);
  const lines = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(lines.length, cases.length);
  return lines;
}

const kInstances = 5;

test('json-schema-faker instances, valid by ajv, are accepted token by token', () => {
  const cases = [];
  const seen = new Set();
  for (const [name, schema] of Object.entries(schemas)) {
    const validate = ajv.compile(schema);
    for (let seed = 1; seed <= kInstances; ++seed) {
      const value = generateSync(schema, { seed, alwaysFakeOptionals: seed % 2 === 0, refDepthMax: 3 });
      const text = JSON.stringify(value);
      assert.ok(validate(value), `${name} seed ${seed}: json-schema-faker made an invalid instance ${text}: ` +
        ajv.errorsText(validate.errors));
      seen.add(text);
      cases.push({ kind: 'json_schema', source: schema, text, name, seed });
    }
  }
  // Seeds that all made the same instance would check little (json-schema-faker leaves maps empty).
  assert.ok(seen.size >= cases.length * 0.75, `only ${seen.size} distinct instances of ${cases.length}`);
  if (process.env.GRAMMAR_SHOW) for (const c of cases) console.log(c.name, c.text);
  const answers = accepts(cases);
  const refused = cases.filter((c, i) => !answers[i].ok).map((c) => {
    const i = cases.indexOf(c);
    return `${c.name} seed ${c.seed}: ${c.text}\n  ${answers[i].error}`;
  });
  assert.deepEqual(refused, [], `${refused.length} of ${cases.length} valid instances refused`);
});

test('randexp strings of each regex are accepted token by token', () => {
  const cases = [];
  for (const pattern of regexes) {
    const re = new RegExp(`^(?:${pattern})$`);
    for (let seed = 1; seed <= kInstances; ++seed) {
      const gen = new RandExp(pattern);
      const draw = rng(seed * 7919 + pattern.length);
      gen.randInt = (lo, hi) => lo + Math.floor(draw() * (hi - lo + 1));
      gen.max = 6;
      const text = gen.gen();
      assert.ok(re.test(text), `${pattern}: randexp made '${text}', which the regex does not match`);
      cases.push({ kind: 'regex', source: pattern, text, seed });
    }
  }
  const answers = accepts(cases);
  const refused = cases.filter((c, i) => !answers[i].ok).map((c) => {
    const i = cases.indexOf(c);
    return `${c.source} seed ${c.seed}: '${c.text}'\n  ${answers[i].error}`;
  });
  assert.deepEqual(refused, [], `${refused.length} of ${cases.length} regex strings refused`);
});

test('the shared token-mask cache gives the full walk\'s mask bit for bit along random walks', () => {
  // src/grammar/mask_cache.*: every schema and regex of the corpus, seeded walks with rollbacks.
  const cases = [
    ...Object.entries(schemas).map(([name, schema], i) => ({ kind: 'json_schema', source: schema, name, seed: 10 + i })),
    ...regexes.map((pattern, i) => ({ kind: 'regex', source: pattern, name: pattern, seed: 100 + i })),
  ].map((c) => ({ ...c, compare: { seed: c.seed, walks: 2, steps: 40 } }));
  const answers = accepts(cases);
  const differ = cases.filter((c, i) => !answers[i].ok).map((c) => `${c.name}: ${answers[cases.indexOf(c)].error}`);
  assert.deepEqual(differ, [], `${differ.length} of ${cases.length} grammars differ`);
});

test('a text outside the grammar is refused (the check can fail)', () => {
  const [extra, ws, badRegex] = accepts([
    { kind: 'json_schema', source: schemas.weather_tool, text: '{"location":"Oslo","unit":"kelvin"}' },
    { kind: 'json_schema', source: schemas.flat, text: '{"kind": "a", "n": 1}' },
    { kind: 'regex', source: regexes[0], text: 'AB-12' },
  ]);
  assert.equal(extra.ok, false);
  assert.equal(ws.ok, false);  // compact JSON only
  assert.equal(badRegex.ok, false);
});
