// Stored Responses against the real server with the official client: `store` (default true),
// `previous_response_id` (the stored input and output come before the new input; instructions do not),
// GET and DELETE /v1/responses/{id}, and OpenAI's 404 for an id that cannot be continued.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openaiServerForFile, startServer, MODEL, npm, metrics } from './harness.mjs';

const OpenAI = npm('openai');

const file = openaiServerForFile();

// Fixed sampling, so that the same prompt gives the same output.
const params = { model: MODEL, max_output_tokens: 8, temperature: 0, seed: 7, ignore_eos: true };
const notFound = (id) => (e) => e.status === 404 && e.code === 'previous_response_not_found' &&
  e.param === 'previous_response_id' && e.message.includes(id);

async function streamed(body) {
  const stream = await file.client.responses.create({ ...body, stream: true });
  let final = null;
  for await (const ev of stream) if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
  assert.ok(final, 'a final response event');
  return final;
}

test('a continuation renders the same prompt as sending the whole conversation', async () => {
  const first = await file.client.responses.create({ ...params, instructions: 'Answer in one word.', input: 'Count to three.' });
  assert.ok(first.id.startsWith('resp_'));
  assert.ok(first.output.length > 0);
  const next = await file.client.responses.create({ ...params, previous_response_id: first.id, input: 'Now to four.' });
  // By hand: the first input, its output items as returned, the new input; no instructions (not carried over).
  const whole = await file.client.responses.create({
    ...params, store: false,
    input: [{ role: 'user', content: 'Count to three.' }, ...first.output, { role: 'user', content: 'Now to four.' }],
  });
  assert.equal(next.usage.input_tokens, whole.usage.input_tokens);
  assert.ok(next.usage.input_tokens > first.usage.input_tokens);
  assert.deepEqual(next.output.map((o) => o.content ?? o.summary), whole.output.map((o) => o.content ?? o.summary));
  assert.equal(next.output_text, whole.output_text);

  // A third turn chains through both (the continuation was stored in turn).
  const third = await file.client.responses.create({ ...params, previous_response_id: next.id, input: 'And five.' });
  const wholeThird = await file.client.responses.create({
    ...params, store: false,
    input: [{ role: 'user', content: 'Count to three.' }, ...first.output, { role: 'user', content: 'Now to four.' },
      ...next.output, { role: 'user', content: 'And five.' }],
  });
  assert.equal(third.usage.input_tokens, wholeThird.usage.input_tokens);
  assert.equal(third.output_text, wholeThird.output_text);
});

test('a streamed response is stored and can be continued, streamed or not', async () => {
  const first = await streamed({ ...params, input: [{ role: 'user', content: 'Name a colour.' }] });
  const next = await streamed({ ...params, previous_response_id: first.id, input: 'Another one.' });
  const whole = await file.client.responses.create({
    ...params, store: false,
    input: [{ role: 'user', content: 'Name a colour.' }, ...first.output, { role: 'user', content: 'Another one.' }],
  });
  assert.equal(next.usage.input_tokens, whole.usage.input_tokens);
  assert.equal(next.output.map((o) => JSON.stringify(o.content ?? o.summary)).join(),
    whole.output.map((o) => JSON.stringify(o.content ?? o.summary)).join());
});

test('an unknown id is a 404 previous_response_not_found', async () => {
  await assert.rejects(file.client.responses.create({ ...params, previous_response_id: 'resp_unknown0123', input: 'Hi.' }),
    notFound('resp_unknown0123'));
  await assert.rejects(file.client.responses.retrieve('resp_unknown0123'), (e) => e.status === 404);
  await assert.rejects(file.client.responses.delete('resp_unknown0123'), (e) => e.status === 404);
  await assert.rejects(file.client.responses.create({ ...params, previous_response_id: 42, input: 'Hi.' }),
    (e) => e.status === 400 && e.param === 'previous_response_id');
});

test('a store:false response cannot be continued or retrieved', async () => {
  const r = await file.client.responses.create({ ...params, store: false, input: 'Hi.' });
  await assert.rejects(file.client.responses.create({ ...params, previous_response_id: r.id, input: 'Again.' }),
    notFound(r.id));
  await assert.rejects(file.client.responses.retrieve(r.id), (e) => e.status === 404);
});

test('GET returns the stored response; DELETE removes it', async () => {
  const r = await file.client.responses.create({ ...params, input: 'Say hi.' });
  const got = await file.client.responses.retrieve(r.id);
  assert.equal(got.id, r.id);
  assert.deepEqual(got.output, r.output);
  assert.deepEqual(got.usage, r.usage);
  const m = await metrics(file.server);
  assert.ok(m.get('dsinfer_responses_stored') >= 1);
  assert.ok(m.get('dsinfer_responses_stored_bytes') > 0);
  await file.client.responses.delete(r.id);
  await assert.rejects(file.client.responses.retrieve(r.id), (e) => e.status === 404);
  await assert.rejects(file.client.responses.create({ ...params, previous_response_id: r.id, input: 'Again.' }),
    notFound(r.id));
  const post = await fetch(`${file.server.url}/v1/responses/${r.id}`, { method: 'PUT' });
  assert.equal(post.status, 405);
});

test('--responses-store-bytes 0 stores nothing', async () => {
  const off = await startServer(['--responses-store-bytes', '0']);
  try {
    const c = new OpenAI({ baseURL: `${off.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
    const r = await c.responses.create({ ...params, input: 'Hi.' });
    await assert.rejects(c.responses.create({ ...params, previous_response_id: r.id, input: 'Again.' }), notFound(r.id));
    await assert.rejects(c.responses.retrieve(r.id), (e) => e.status === 404);
  } finally {
    const { code } = await off.stop();
    assert.equal(code, 0, `server exit code\n${off.stderr()}`);
  }
});
