// Strict tool calls against the real server on the tiny random-weight model: every sampled output is a
// fuzz case. With `strict: true` tools the model's DSML tool-call block is grammar-constrained, so every
// call that ends (finish_reason "tool_calls") carries arguments that validate against the tool's schema
// with an independent validator (ajv + ajv-formats): Chat (plain, streamed, the SDK's parse helper),
// a named tool choice, Anthropic Messages tools with `strict: true` (a named tool_choice, and `any`:
// auto in the recipe's prompt, a call forced by the grammar, so even the random model always calls), and
// Responses function tools, strict by default as in OpenAI's API. Leaves are bounded (enums, lengths,
// integer ranges, item counts) so that random sampling finishes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openaiServerForFile, startServer, metrics, MODEL, npm } from './harness.mjs';

const Ajv2020 = npm('ajv/dist/2020');
const addFormats = npm('ajv-formats');
const Anthropic = npm('@anthropic-ai/sdk');
const OpenAI = npm('openai');

const file = openaiServerForFile([], { timeout: 300000 });

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

const schemas = {
  set_mode: { type: 'object', properties: {
    mode: { enum: ['on', 'off', 'auto'] }, level: { type: 'integer', minimum: 0, maximum: 9 },
    note: { type: ['string', 'null'], maxLength: 4 } }, required: ['mode', 'level'], additionalProperties: false },
  book: { type: 'object', $defs: { guest: { type: 'object', properties: { name: { type: 'string', maxLength: 3 },
    vip: { type: 'boolean' } }, required: ['name'] } },
  properties: { day: { type: 'string', format: 'date' }, guests: { type: 'array', items: { $ref: '#/$defs/guest' },
    maxItems: 2 }, rooms: { type: 'integer', minimum: 1, maximum: 3 } }, required: ['day', 'guests'] },
  noop: { type: 'object', properties: {} },
};
const tools = Object.entries(schemas).map(([name, parameters]) => ({
  type: 'function', function: { name, description: `tool ${name}`, parameters, strict: true } }));
const validators = Object.fromEntries(Object.entries(schemas).map(([n, s]) => [n, ajv.compile(s)]));

function checkCall(name, args, where) {
  assert.ok(validators[name], `${where}: unknown tool ${name}`);
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(args); }, `${where}: ${args}`);
  assert.ok(validators[name](value), `${where}: ${name} ${args}\n${ajv.errorsText(validators[name].errors)}`);
}

const request = (seed, extra = {}) => ({
  model: MODEL, temperature: 1, seed, max_tokens: 600, thinking: { type: 'disabled' },
  messages: [{ role: 'user', content: 'Use the tools.' }], tools, tool_choice: 'required', ...extra,
});

test('sampled tool calls validate against their schemas (ajv)', async () => {
  let finished = 0;
  let calls = 0;
  for (let seed = 1; seed <= 8; ++seed) {
    const r = await file.client.chat.completions.create(request(seed));
    const c = r.choices[0];
    if (c.finish_reason !== 'tool_calls') continue;
    ++finished;
    assert.ok(c.message.tool_calls.length >= 1, `seed ${seed}`);
    for (const call of c.message.tool_calls) {
      ++calls;
      checkCall(call.function.name, call.function.arguments, `seed ${seed}`);
    }
  }
  console.log(`finished ${finished}/8, ${calls} calls`);
  assert.ok(finished >= 4, `only ${finished} of 8 outputs finished within max_tokens`);
});

test('streamed tool calls validate, one call with parallel_tool_calls false', async () => {
  let finished = 0;
  for (let seed = 11; seed <= 16; ++seed) {
    const stream = await file.client.chat.completions.create(request(seed, { stream: true, parallel_tool_calls: false }));
    const byIndex = new Map();
    let finish = null;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      for (const d of choice.delta?.tool_calls ?? []) {
        const acc = byIndex.get(d.index) ?? { name: '', args: '' };
        if (d.function?.name) acc.name += d.function.name;
        if (d.function?.arguments) acc.args += d.function.arguments;
        byIndex.set(d.index, acc);
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    if (finish !== 'tool_calls') continue;
    ++finished;
    assert.equal(byIndex.size, 1, `seed ${seed}: parallel_tool_calls false gives one call`);
    for (const { name, args } of byIndex.values()) checkCall(name, args, `stream seed ${seed}`);
  }
  assert.ok(finished >= 3, `only ${finished} of 6 streams finished`);
});

test('a named tool choice calls that tool; the SDK parse helper reads the arguments', async () => {
  let finished = 0;
  for (let seed = 21; seed <= 24; ++seed) {
    let r;
    try {
      r = await file.client.chat.completions.parse(
        request(seed, { tool_choice: { type: 'function', function: { name: 'set_mode' } } }));
    } catch (e) {
      // The parse helper throws for an output cut at max_tokens (finish_reason "length"): not finished.
      if (e?.constructor?.name === 'LengthFinishReasonError') continue;
      throw e;
    }
    const c = r.choices[0];
    if (c.finish_reason !== 'tool_calls') continue;
    ++finished;
    for (const call of c.message.tool_calls) {
      assert.equal(call.function.name, 'set_mode');
      assert.ok(validators.set_mode(call.function.parsed_arguments), JSON.stringify(call.function.parsed_arguments));
    }
  }
  assert.ok(finished >= 2, `only ${finished} of 4 outputs finished`);
});

test('tool_choice auto: text or valid calls; what cannot be enforced is a 400 naming it', async () => {
  for (let seed = 31; seed <= 33; ++seed) {
    const r = await file.client.chat.completions.create(request(seed, { tool_choice: 'auto', max_tokens: 60 }));
    const c = r.choices[0];
    assert.ok(!(c.message.content ?? '').includes('\uFF5CDSML\uFF5C'), c.message.content);
    for (const call of c.message.tool_calls ?? []) {
      if (c.finish_reason === 'tool_calls') checkCall(call.function.name, call.function.arguments, `auto seed ${seed}`);
    }
  }
  const bad = [{ type: 'function', function: { name: 'f', strict: true,
    parameters: { type: 'object', properties: { a: { type: 'string', not: { const: 'x' } } } } } }];
  await assert.rejects(file.client.chat.completions.create(request(1, { tools: bad })),
    (e) => e.status === 400 && /strict tool 'f'/.test(e.message) && /unsupported keyword 'not'/.test(e.message));
  await assert.rejects(file.client.chat.completions.create(request(1, { regex: '[a-z]+' })),
    (e) => e.status === 400 && /strict tools cannot be combined/.test(e.message));
});

test('Anthropic Messages tools with strict: true give valid tool_use input', async () => {
  const client = new Anthropic({ baseURL: file.server.url, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
  let finished = 0;
  for (let seed = 41; seed <= 44; ++seed) {
    const m = await client.messages.create({
      model: MODEL, max_tokens: 600, temperature: 1, messages: [{ role: 'user', content: 'Book it.' }],
      tools: [{ name: 'book', description: 'Book rooms', input_schema: schemas.book, strict: true }],
      thinking: { type: 'disabled' }, tool_choice: { type: 'tool', name: 'book' },
      seed,  // a dsinfer extension on every route
    });
    if (m.stop_reason !== 'tool_use') continue;
    ++finished;
    const uses = m.content.filter((b) => b.type === 'tool_use');
    assert.ok(uses.length >= 1);
    for (const u of uses) assert.ok(validators.book(u.input), `${JSON.stringify(u.input)}\n${ajv.errorsText(validators.book.errors)}`);
  }
  assert.ok(finished >= 2, `only ${finished} of 4 outputs finished`);
});

test('Anthropic Messages tool_choice any with strict tools always calls a tool', async () => {
  const client = new Anthropic({ baseURL: file.server.url, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
  let finished = 0;
  for (let seed = 61; seed <= 64; ++seed) {
    const m = await client.messages.create({
      model: MODEL, max_tokens: 600, temperature: 1, messages: [{ role: 'user', content: 'Do something.' }],
      tools: [{ name: 'set_mode', input_schema: schemas.set_mode, strict: true },
        { name: 'noop', input_schema: schemas.noop, strict: true }],
      thinking: { type: 'disabled' }, tool_choice: { type: 'any' }, seed,
    });
    // Without the forced block a random model writes text (never a DSML marker, the grammar forbids it).
    assert.equal(m.content[0]?.type, 'tool_use', `seed ${seed}: ${JSON.stringify(m.content)}`);
    assert.ok(!m.content.some((b) => b.type === 'text' && b.text.trim() !== ''), JSON.stringify(m.content));
    if (m.stop_reason !== 'tool_use') continue;
    ++finished;
    for (const u of m.content.filter((b) => b.type === 'tool_use')) {
      assert.ok(validators[u.name](u.input), `${u.name} ${JSON.stringify(u.input)}`);
    }
  }
  assert.ok(finished >= 2, `only ${finished} of 4 outputs finished`);
});

test('Responses function tools are strict unless they say strict: false', async () => {
  const fn = (name, extra = {}) => ({ type: 'function', name, parameters: schemas[name], ...extra });
  let finished = 0;
  for (let seed = 71; seed <= 74; ++seed) {
    const r = await file.client.responses.create({
      model: MODEL, input: 'Use the tools.', max_output_tokens: 600, temperature: 1, seed,
      reasoning: { effort: 'none' }, tools: [fn('set_mode'), fn('book')], tool_choice: 'required',
    });
    const calls = r.output.filter((o) => o.type === 'function_call');
    if (r.status !== 'completed' || calls.length === 0) continue;
    ++finished;
    for (const c of calls) checkCall(c.name, c.arguments, `responses seed ${seed}`);
  }
  assert.ok(finished >= 2, `only ${finished} of 4 outputs finished`);
  // A schema dsinfer cannot enforce: served non-strict when strict is left out, a 400 when asked for.
  const loose = { type: 'object', properties: { a: { type: 'string', not: { const: 'x' } } } };
  const ok = await file.client.responses.create({ model: MODEL, input: 'x', max_output_tokens: 8, seed: 1,
    reasoning: { effort: 'none' }, tools: [{ type: 'function', name: 'f', parameters: loose }] });
  assert.equal(ok.object, 'response');
  await assert.rejects(file.client.responses.create({ model: MODEL, input: 'x', max_output_tokens: 8,
    reasoning: { effort: 'none' }, tools: [{ type: 'function', name: 'f', strict: true, parameters: loose }] }),
  (e) => e.status === 400 && /unsupported keyword 'not'/.test(e.message));
  // Strict only by default beside text.format: the format applies, no 400.
  const fmt = await file.client.responses.create({ model: MODEL, input: 'Reply in json.', max_output_tokens: 40, seed: 2,
    reasoning: { effort: 'none' }, tools: [fn('noop')], text: { format: { type: 'json_object' } } });
  assert.equal(fmt.object, 'response');
});

test('under speculation tool calls still validate', async () => {
  // MTP drafts are checked against the grammar; refused ones are rolled back in the matcher. Six at once.
  const spec = await startServer(['--speculation', '--draft-tokens', '3']);
  try {
    const c = new OpenAI({ baseURL: `${spec.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
    const jobs = [];
    for (let seed = 51; seed <= 56; ++seed) jobs.push(c.chat.completions.create(request(seed)).then((r) => ({ seed, r })));
    let finished = 0;
    for (const { seed, r } of await Promise.all(jobs)) {
      const choice = r.choices[0];
      if (choice.finish_reason !== 'tool_calls') continue;
      ++finished;
      for (const call of choice.message.tool_calls) checkCall(call.function.name, call.function.arguments, `spec seed ${seed}`);
    }
    assert.ok(finished >= 3, `only ${finished} of 6 outputs finished`);
    const m = await metrics(spec);
    assert.ok(m.get('dsinfer_engine_draft_tokens_total') > 0, 'drafts were proposed');
  } finally {
    const { code } = await spec.stop();
    assert.equal(code, 0, `server exit code\n${spec.stderr()}`);
  }
});
