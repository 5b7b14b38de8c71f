// Structured output against the real server on the tiny random-weight model: random weights make every
// sampled output a fuzz case. Soundness: every output that ends (finish_reason "stop") parses and
// validates against its schema with an independent validator (ajv + ajv-formats), and every output cut
// by max_tokens is still a prefix the grammar allowed (checked by the stop cases). Leaves are bounded
// (enums, lengths, integer ranges, item counts) so that random sampling finishes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openaiServerForFile, startServer, metrics, MODEL, npm } from './harness.mjs';
import { sharedSchemas } from '../grammar/schema_corpus.mjs';

const OpenAI = npm('openai');
const Ajv2020 = npm('ajv/dist/2020');  // JSON Schema 2020-12: prefixItems, $defs
const addFormats = npm('ajv-formats');

const file = openaiServerForFile([], { timeout: 300000 });

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

const corpus = {
  ...sharedSchemas,
  // oneOf compiles only with provably disjoint branches (a discriminated union here): ajv checks that
  // exactly one branch matches.
  oneof: { oneOf: [{ type: 'null' }, { type: 'object', properties: { kind: { const: 'circle' },
    r: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['kind', 'r'] }, { type: 'object', properties: {
    kind: { enum: ['square', 'box'] }, side: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['kind', 'side'] }] },
};

const ask = (schema, seed, extra = {}) => file.client.chat.completions.create({
  model: MODEL, temperature: 1, seed, max_tokens: 300, thinking: { type: 'disabled' },
  messages: [{ role: 'user', content: 'Reply in JSON.' }],
  response_format: { type: 'json_schema', json_schema: { name: 'out', strict: true, schema } }, ...extra,
});

test('sampled outputs validate against their schema (ajv)', async () => {
  let finished = 0;
  for (const [name, schema] of Object.entries(corpus)) {
    const validate = ajv.compile(schema);
    for (let seed = 1; seed <= 4; ++seed) {
      const r = await ask(schema, seed);
      const c = r.choices[0];
      if (c.finish_reason !== 'stop') continue;
      ++finished;
      let value;
      assert.doesNotThrow(() => { value = JSON.parse(c.message.content); }, `${name} seed ${seed}: ${c.message.content}`);
      assert.ok(validate(value), `${name} seed ${seed}: ${c.message.content}\n${ajv.errorsText(validate.errors)}`);
    }
  }
  assert.ok(finished >= 10, `only ${finished} of 24 outputs finished within max_tokens`);
});

test('under speculation outputs still validate', async () => {
  // A second server with MTP drafts (refused drafts are rejected and rolled back in the matcher), ten
  // requests at once. (Preemption is covered by tests/engine/constraint_test.cpp: the tiny model does not
  // fill even a 1 MiB budget.)
  const spec = await startServer(['--speculation', '--draft-tokens', '3']);
  try {
    const c = new OpenAI({ baseURL: `${spec.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
    const jobs = [];
    for (const [name, schema] of Object.entries(corpus)) {
      for (let seed = 1; seed <= 2; ++seed) {
        jobs.push(c.chat.completions.create({
          model: MODEL, temperature: 1, seed, max_tokens: 300, thinking: { type: 'disabled' },
          messages: [{ role: 'user', content: 'Reply in JSON.' }],
          response_format: { type: 'json_schema', json_schema: { name: 'out', strict: true, schema } },
        }).then((r) => ({ name, seed, r })));
      }
    }
    let finished = 0;
    for (const { name, seed, r } of await Promise.all(jobs)) {
      const choice = r.choices[0];
      if (choice.finish_reason !== 'stop') continue;
      ++finished;
      assert.ok(ajv.validate(corpus[name], JSON.parse(choice.message.content)),
        `${name} seed ${seed}: ${choice.message.content}\n${ajv.errorsText()}`);
    }
    assert.ok(finished >= 5, `only ${finished} of ${jobs.length} outputs finished`);
    const m = await metrics(spec);
    assert.ok(m.get('dsinfer_engine_draft_tokens_total') > 0, 'drafts were proposed');
    console.log(`drafts: ${m.get('dsinfer_engine_draft_tokens_total')}, `
      + `accepted: ${m.get('dsinfer_engine_accepted_draft_tokens_total')}, finished: ${finished}/${jobs.length}`);
  } finally {
    const { code } = await spec.stop();
    assert.equal(code, 0, `server exit code\n${spec.stderr()}`);
  }
});

test('the SDK structured-output helper parses what the server returns', async () => {
  const schema = corpus.flat;
  const r = await file.client.chat.completions.parse({
    model: MODEL, temperature: 1, seed: 7, max_tokens: 300, thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'Reply in JSON.' }],
    response_format: { type: 'json_schema', json_schema: { name: 'flat', strict: true, schema } },
  });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(ajv.validate(schema, m.parsed), `${m.content}`);
});

test('json_object gives a JSON object; Responses text.format follows its schema', async () => {
  const r = await file.client.chat.completions.create({
    model: MODEL, temperature: 1, seed: 3, max_tokens: 40, thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'Reply in JSON.' }], response_format: { type: 'json_object' } });
  assert.match(r.choices[0].message.content, /^\{/);
  const schema = corpus.allof;
  const resp = await file.client.responses.create({
    model: MODEL, temperature: 1, max_output_tokens: 200, input: 'Reply in JSON.', reasoning: { effort: 'none' },
    text: { format: { type: 'json_schema', name: 'x', schema, strict: true } } });
  assert.ok(ajv.validate(schema, JSON.parse(resp.output_text)), resp.output_text);
});

test('regex and ebnf request fields (dsinfer extensions)', async () => {
  for (let seed = 1; seed <= 3; ++seed) {
    const r = await file.client.chat.completions.create({ model: MODEL, temperature: 1, seed, max_tokens: 60,
      thinking: { type: 'disabled' }, messages: [{ role: 'user', content: 'A phone number?' }],
      regex: '\\(\\d{3}\\) \\d{3}-\\d{4}' });
    assert.match(r.choices[0].message.content, /^\(\d{3}\) \d{3}-\d{4}$/);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const e = await file.client.chat.completions.create({ model: MODEL, temperature: 1, seed, max_tokens: 60,
      thinking: { type: 'disabled' }, messages: [{ role: 'user', content: 'Yes or no?' }],
      ebnf: 'root ::= answer "." \nanswer ::= "yes" | "no"' });
    assert.match(e.choices[0].message.content, /^(yes|no)\.$/);
  }
});

test('what cannot be enforced is a 400 naming it', async () => {
  await assert.rejects(ask({ type: 'object', properties: { a: { not: { type: 'string' } } } }, 1),
    (e) => e.status === 400 && /unsupported keyword 'not'/.test(e.message) && /#\/properties\/a/.test(e.message));
  await assert.rejects(ask({ $ref: '#/$defs/none' }, 1), (e) => e.status === 400 && /unknown \$ref '#\/\$defs\/none'/.test(e.message));
  await assert.rejects(file.client.chat.completions.create({ model: MODEL, max_tokens: 5, thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'x' }], regex: '(a' }), (e) => e.status === 400 && /regex line 1 column 1: unclosed/.test(e.message));
  await assert.rejects(file.client.chat.completions.create({ model: MODEL, max_tokens: 5, thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'x' }], ebnf: 'root ::= [a-' }), (e) => e.status === 400 && /ebnf line 1 column 10/.test(e.message));
});
