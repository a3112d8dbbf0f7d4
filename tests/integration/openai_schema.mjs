// Validation against the OpenAI API's own schemas (schemas/openai.json, extracted from the
// official OpenAPI document by scripts/extract-openai-schemas.mjs), with ajv.
//
//   validate('CreateChatCompletionResponse', body)  -> [] or ['/choices/0/message: must have ...', ...]
//   assertValid('CreateChatCompletionResponse', body, 'what it is')  (throws an AssertionError)
//
// The document is OpenAPI 3.1 (JSON Schema 2020-12) with a few older OpenAPI keywords mixed
// in, which JSON Schema does not know. Before compiling, each schema is rewritten:
//   - `nullable: true` means "or null": next to `type`, "null" joins the type (and null the
//     `enum`, if there is one); without a `type` (next to `$ref`, `oneOf`, `allOf` ...), the
//     schema becomes `anyOf: [<the schema>, {type: "null"}]`. `nullable: false` is dropped.
//   - `discriminator` is kept where ajv can use it (its `discriminator: true` option: on a
//     `oneOf` whose every branch, through one `$ref`, has the property as a required const
//     or enum of distinct strings), so that a body of a known `type` is checked against that
//     branch alone and the errors name it. Elsewhere (on `anyOf`, or a branch that is itself
//     a union) it is dropped: the `oneOf`/`anyOf` alone says the same, with longer errors.
//   - `$recursiveRef: "#"` (draft 2019-09, in CompoundFilter, whose root has
//     `$recursiveAnchor: true` and is referenced by no other such root) becomes a `$ref` to
//     the component it is in.
//   - Keywords ajv does not know (`deprecated` is known; OpenAPI's own are not) are ignored
//     (`strict: false`); formats (`unixtime`, `float`, `uri`, `date`) are not checked.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv2020 from 'ajv/dist/2020.js';

const here = path.dirname(fileURLToPath(import.meta.url));
export const SCHEMA_FILE = path.join(here, 'schemas', 'openai.json');

const file = JSON.parse(fs.readFileSync(SCHEMA_FILE, 'utf8'));
// Where the schemas come from: {repository, commit, date, sha256, openapi, version}.
export const SOURCE = file.source;
const BASE = 'https://sluice.invalid/openai.json';
const REF = /^#\/components\/schemas\/([^/]+)$/;

// Subschema positions (as in the extractor).
const ONE = ['items', 'not', 'additionalProperties', 'unevaluatedProperties', 'unevaluatedItems', 'propertyNames', 'contains', 'if', 'then', 'else'];
const LIST = ['allOf', 'anyOf', 'oneOf', 'prefixItems'];
const MAP = ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas'];
// What stays beside the anyOf when a typeless nullable schema is wrapped.
const ANNOTATIONS = ['description', 'title', 'default', 'deprecated'];

function walkChildren(schema, fn) {
  const out = {};
  for (const [k, v] of Object.entries(schema)) {
    if (ONE.includes(k) && v !== null && typeof v === 'object') out[k] = fn(v, k);
    else if (LIST.includes(k)) out[k] = v.map((s, i) => fn(s, `${k}/${i}`));
    else if (MAP.includes(k)) out[k] = Object.fromEntries(Object.entries(v).map(([n, s]) => [n, fn(s, `${k}/${n}`)]));
    else out[k] = v;
  }
  return out;
}

// Step 1: nullable and $recursiveRef, bottom up.
function convert(schema, component) {
  if (typeof schema !== 'object' || schema === null) return schema;
  let s = walkChildren(schema, (sub) => convert(sub, component));
  if ('$recursiveRef' in s) {
    if (s.$recursiveRef !== '#') throw new Error(`${component}: $recursiveRef ${s.$recursiveRef} is not handled`);
    const { $recursiveRef, ...rest } = s;
    s = { ...rest, $ref: `#/components/schemas/${component}` };
  }
  delete s.$recursiveAnchor;
  if ('nullable' in s) {
    const { nullable, ...rest } = s;
    s = rest;
    if (nullable === true) {
      if ('type' in s) {
        const types = Array.isArray(s.type) ? s.type : [s.type];
        s.type = types.includes('null') ? types : [...types, 'null'];
        if (Array.isArray(s.enum) && !s.enum.includes(null)) s.enum = [...s.enum, null];
      } else {
        const outer = {};
        const inner = {};
        for (const [k, v] of Object.entries(s)) (ANNOTATIONS.includes(k) ? outer : inner)[k] = v;
        s = { ...outer, anyOf: [inner, { type: 'null' }] };
      }
    }
  }
  return s;
}

const converted = {};
for (const [name, schema] of Object.entries(file.schemas)) converted[name] = convert(schema, name);

// Step 2: keep each discriminator only where ajv's rules hold (see its
// vocabularies/discriminator: it throws at compile time otherwise).
const dropped = [];
function resolveOnce(s) {
  if (s && typeof s === 'object' && typeof s.$ref === 'string' && Object.keys(s).every((k) => k === '$ref' || ANNOTATIONS.includes(k))) {
    const m = REF.exec(s.$ref);
    return m ? converted[decodeURIComponent(m[1])] : undefined;
  }
  return s;
}
function discriminatorUsable(s) {
  const tag = s.discriminator?.propertyName;
  if (typeof tag !== 'string' || s.discriminator.mapping || !Array.isArray(s.oneOf)) return false;
  const topRequired = Array.isArray(s.required) && s.required.includes(tag);
  const seen = new Set();
  for (const branch of s.oneOf) {
    const b = resolveOnce(branch);
    const prop = b?.properties?.[tag];
    if (!prop || typeof prop !== 'object') return false;
    if (!topRequired && !(Array.isArray(b.required) && b.required.includes(tag))) return false;
    const values = prop.const ? [prop.const] : Array.isArray(prop.enum) ? prop.enum : null;
    if (!values) return false;
    for (const v of values) {
      if (typeof v !== 'string' || seen.has(v)) return false;
      seen.add(v);
    }
  }
  return true;
}
function discriminators(schema, where) {
  if (typeof schema !== 'object' || schema === null) return schema;
  const s = walkChildren(schema, (sub, k) => discriminators(sub, `${where}/${k}`));
  if ('discriminator' in s && !discriminatorUsable(s)) {
    dropped.push(where);
    delete s.discriminator;
  }
  return s;
}
for (const name of Object.keys(converted)) converted[name] = discriminators(converted[name], name);

// Where a discriminator was dropped (for the curious: node -e "import('./openai_schema.mjs').then(m => console.log(m.DROPPED_DISCRIMINATORS))").
export const DROPPED_DISCRIMINATORS = dropped;

const ajv = new Ajv2020({
  strict: false,
  allErrors: true,
  discriminator: true,
  validateFormats: false,
  allowUnionTypes: true,
});
ajv.addSchema({ $id: BASE, components: { schemas: converted } });

export function schemaNames() {
  return Object.keys(converted).sort();
}

const compiled = new Map();
// The compiled ajv validator of one component schema (cached).
export function validator(name) {
  if (!(name in converted)) throw new Error(`no schema ${name} in ${SCHEMA_FILE} (regenerate it with scripts/extract-openai-schemas.mjs)`);
  let v = compiled.get(name);
  if (!v) {
    v = ajv.getSchema(`${BASE}#/components/schemas/${encodeURIComponent(name)}`);
    if (!v) throw new Error(`ajv could not compile ${name}`);
    compiled.set(name, v);
  }
  return v;
}

function short(v) {
  const s = JSON.stringify(v);
  if (s === undefined) return 'undefined';
  return s.length > 120 ? `${s.slice(0, 117)}...` : s;
}

function at(value, pointer) {
  let v = value;
  for (const part of pointer.split('/').slice(1)) {
    if (v === null || typeof v !== 'object') return undefined;
    v = v[part.replace(/~1/g, '/').replace(/~0/g, '~')];
  }
  return v;
}

// One line per ajv error: "<path>: <message> (<detail>) [schema: <schemaPath>]; got <value>".
// When a oneOf/anyOf fails, ajv also reports each branch's errors: they stay (they tell
// which branch came closest), after the errors outside any union.
function describe(errors, value) {
  const lines = [];
  const seen = new Set();
  for (const e of errors) {
    const where = e.instancePath || '/';
    let detail = '';
    if (e.keyword === 'additionalProperties') detail = ` '${e.params.additionalProperty}'`;
    else if (e.keyword === 'enum') detail = `: ${short(e.params.allowedValues)}`;
    else if (e.keyword === 'const') detail = `: ${short(e.params.allowedValue)}`;
    else if (e.keyword === 'discriminator') detail = ` (${short(e.params.tagValue)})`;
    const line = `${where}: ${e.message}${detail}; got ${short(at(value, e.instancePath))} [${e.schemaPath}]`;
    if (!seen.has(line)) {
      seen.add(line);
      lines.push(line);
    }
  }
  return lines;
}

// The errors of `value` against component schema `name`: an empty list when it is valid.
export function validate(name, value) {
  const v = validator(name);
  if (v(value)) return [];
  return describe(v.errors ?? [], value);
}

// Throws an AssertionError listing every error when `value` does not match schema `name`.
// `what` says what the value is (e.g. "ollama route, streamed, chunk 3").
export function assertValid(name, value, what = '') {
  const errors = validate(name, value);
  if (errors.length === 0) return;
  const label = what ? `${what}: ` : '';
  assert.fail(`${label}not a valid ${name} (OpenAI OpenAPI ${SOURCE.commit.slice(0, 12)}):\n  ${errors.join('\n  ')}\nbody: ${short(value).length < 120 ? JSON.stringify(value) : JSON.stringify(value, null, 1).slice(0, 4000)}`);
}
