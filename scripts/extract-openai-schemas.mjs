#!/usr/bin/env node
// Extracts from the OpenAI API's OpenAPI document (openai/openai-openapi, openapi.yaml) the
// component schemas that the conformance tests validate against: the roots below and every
// schema they reference, transitively. Writes tests/integration/schemas/openai.json with
// sorted keys, so that a regeneration from the same document is byte-identical and one from
// a newer document diffs cleanly.
//
// Usage (the YAML parser comes from tests/integration's devDependencies):
//   (cd tests/integration && npm ci)
//   node scripts/extract-openai-schemas.mjs path/to/openapi.yaml [--commit SHA] [--date YYYY-MM-DD] [--out FILE]
//
// The schemas are copied as the document has them (OpenAPI 3.1: JSON Schema with the
// older `nullable` and `discriminator` mixed in); tests/integration/openai_schema.mjs turns
// them into what a JSON Schema validator reads. Only documentation that no validator reads
// is left out: `example`, `examples` and the `x-...` extensions (x-oaiMeta holds long
// example payloads). Descriptions stay, to read alongside a failure.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..');
const require = createRequire(path.join(repo, 'tests', 'integration', 'package.json'));
let YAML;
try {
  YAML = require('yaml');
} catch {
  console.error('the `yaml` package is missing: run `npm ci` in tests/integration first');
  process.exit(2);
}

// The schemas the tests name, and those kept for the Responses API.
export const ROOTS = [
  'CreateChatCompletionRequest',
  'CreateChatCompletionResponse',
  'CreateChatCompletionStreamResponse',
  'CreateEmbeddingRequest',
  'CreateEmbeddingResponse',
  'ErrorResponse',
  'ListModelsResponse',
  'Model',
  'CreateResponse',
  'Response',
  'ResponseStreamEvent',
];

// The document these schemas were taken from, unless told otherwise.
const DEFAULT_SOURCE = {
  repository: 'openai/openai-openapi',
  commit: 'f85dbe223d40e1a31cba812ab2d755c7e98a92a3',
  date: '2026-08-21',
};

function usage(msg) {
  if (msg) console.error(msg);
  console.error('usage: node scripts/extract-openai-schemas.mjs OPENAPI.yaml [--commit SHA] [--date YYYY-MM-DD] [--out FILE]');
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { out: path.join(repo, 'tests', 'integration', 'schemas', 'openai.json'), ...DEFAULT_SOURCE };
  let input;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => (i + 1 < argv.length ? argv[++i] : usage(`${a} needs a value`));
    if (a === '--commit') opts.commit = value();
    else if (a === '--date') opts.date = value();
    else if (a === '--out') opts.out = path.resolve(value());
    else if (a === '-h' || a === '--help') usage();
    else if (a.startsWith('-')) usage(`unknown option ${a}`);
    else if (input) usage('one input document only');
    else input = a;
  }
  if (!input) usage('no input document');
  if (!/^[0-9a-f]{40}$/.test(opts.commit)) usage(`--commit wants 40 hex digits, not ${opts.commit}`);
  return { input: path.resolve(input), ...opts };
}

// Keywords whose value is one subschema, a list of them, or a map of name to subschema.
const ONE = ['items', 'not', 'additionalProperties', 'unevaluatedProperties', 'unevaluatedItems', 'propertyNames', 'contains', 'if', 'then', 'else'];
const LIST = ['allOf', 'anyOf', 'oneOf', 'prefixItems'];
const MAP = ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas'];
const DROPPED = (k) => k === 'example' || k === 'examples' || k.startsWith('x-');
const REF = /^#\/components\/schemas\/([^/]+)$/;

// A copy of `schema` without the dropped keywords, calling `onRef(name)` for every
// component it references. Only schema positions are walked, so a property named
// `example` stays.
function clean(schema, where, onRef) {
  if (typeof schema === 'boolean') return schema;
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) {
    throw new Error(`${where}: not a schema: ${JSON.stringify(schema)}`);
  }
  const out = {};
  for (const [k, v] of Object.entries(schema)) {
    if (DROPPED(k)) continue;
    if (k === '$ref') {
      const m = REF.exec(v);
      if (!m) throw new Error(`${where}: a $ref the extractor does not follow: ${v}`);
      onRef(decodeURIComponent(m[1]), where);
      out[k] = v;
    } else if (ONE.includes(k) && typeof v === 'object') {
      out[k] = clean(v, `${where}/${k}`, onRef);
    } else if (LIST.includes(k)) {
      out[k] = v.map((s, i) => clean(s, `${where}/${k}/${i}`, onRef));
    } else if (MAP.includes(k)) {
      out[k] = Object.fromEntries(Object.entries(v).map(([n, s]) => [n, clean(s, `${where}/${k}/${n}`, onRef)]));
    } else {
      out[k] = v;
    }
  }
  return out;
}

// Every object's keys in code-point order (arrays keep theirs: enum and oneOf order is the
// document's).
function sortKeys(v) {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v === null || typeof v !== 'object') return v;
  const out = {};
  for (const k of Object.keys(v).sort()) out[k] = sortKeys(v[k]);
  return out;
}

export function extract(doc, roots = ROOTS) {
  const all = doc?.components?.schemas;
  if (!all) throw new Error('the document has no components.schemas');
  const picked = {};
  const queue = [...roots];
  const from = new Map(roots.map((r) => [r, '(root)']));
  while (queue.length) {
    const name = queue.shift();
    if (name in picked) continue;
    if (!(name in all)) throw new Error(`components.schemas.${name} is missing (referenced from ${from.get(name)})`);
    picked[name] = clean(all[name], name, (ref, where) => {
      if (!(ref in picked) && !from.has(ref)) from.set(ref, where);
      queue.push(ref);
    });
  }
  return picked;
}

function main() {
  const opts = parseArgs(process.argv.slice(2));
  const text = fs.readFileSync(opts.input, 'utf8');
  const doc = YAML.parse(text, { maxAliasCount: -1 });
  const schemas = extract(doc);
  const out = sortKeys({
    source: {
      repository: opts.repository,
      commit: opts.commit,
      date: opts.date,
      file: 'openapi.yaml',
      sha256: crypto.createHash('sha256').update(text).digest('hex'),
      openapi: doc.openapi,
      version: doc.info?.version,
    },
    generator: 'scripts/extract-openai-schemas.mjs',
    roots: [...ROOTS].sort(),
    schemas,
  });
  fs.mkdirSync(path.dirname(opts.out), { recursive: true });
  const json = JSON.stringify(out, null, 2) + '\n';
  fs.writeFileSync(opts.out, json);
  console.log(`${path.relative(process.cwd(), opts.out)}: ${Object.keys(schemas).length} schemas from ${ROOTS.length} roots, ${Buffer.byteLength(json)} bytes`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
