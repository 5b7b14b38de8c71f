// JSON Schemas shared by the grammar's completeness test (tests/grammar/completeness.test.mjs) and the
// served soundness test (tests/e2e/structured_output.test.mjs): the features of src/grammar/README.md
// "JSON Schema" that both exercise.
export const sharedSchemas = {
  flat: { type: 'object', properties: {
    kind: { enum: ['a', 'b', 'c'] }, n: { type: 'integer', minimum: -5, maximum: 40 }, ok: { type: 'boolean' },
    tag: { type: 'string', maxLength: 4 } }, required: ['kind', 'n'] },
  nested: { type: 'object', properties: {
    id: { type: 'string', format: 'uuid' }, day: { type: 'string', format: 'date' },
    items: { type: 'array', maxItems: 3, items: { type: 'object', properties: {
      code: { type: 'string', pattern: '^[A-Z]{2}[0-9]{1,3}$' }, qty: { type: 'integer', minimum: 1, maximum: 9 } },
      required: ['code'] } } }, required: ['id', 'items'] },
  choices: { anyOf: [{ type: 'null' }, { const: { fixed: [1, 2] } }, { type: 'array', minItems: 1, maxItems: 2,
    prefixItems: [{ type: 'boolean' }], items: { enum: [0, 1] } }] },
  refs: { $defs: { pair: { type: 'object', properties: { l: { type: 'integer', minimum: 0, maximum: 3 },
    r: { type: ['boolean', 'null'] } }, required: ['l', 'r'] } },
    type: 'object', properties: { first: { $ref: '#/$defs/pair' }, rest: { type: 'array', maxItems: 2,
      items: { $ref: '#/$defs/pair' } } }, required: ['first'] },
  allof: { allOf: [{ type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['a'] },
    { properties: { b: { enum: ['x', 'y'] } }, required: ['b'] }] },
};
