#!/usr/bin/env node
// Generates src/protocol.ts from the protocol's JSON Schemas (schemas/protocol/*.schema.json),
// which are themselves generated from the daemon's Rust types. `--check` exits non-zero when
// the committed file is not what the schemas produce, so the types cannot drift.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
// In the SOBA repository the schemas are at its root; in a packed copy of this package
// (`npm pack`), scripts/copy-schemas.mjs put them in the package's own schemas/protocol/.
const repoSchemas = path.resolve(here, '../../../schemas/protocol');
const schemaDir = fs.existsSync(repoSchemas) ? repoSchemas : path.resolve(here, '../schemas/protocol');
if (!fs.existsSync(schemaDir)) {
  console.error(`no protocol schemas at ${repoSchemas} or ${schemaDir}: run \`node scripts/copy-schemas.mjs\` in the SOBA repository's sdk/ts`);
  process.exit(1);
}
const outFile = path.resolve(here, '../src/protocol.ts');

const pascal = (s) =>
  s
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((w) => w[0].toUpperCase() + w.slice(1))
    .join('');

// The daemon's methods are in schemaDir; the requests the daemon sends to a client that offered
// to serve them (`soba/summarize`), and the offers themselves, are in its client/ folder.
const schemaFiles = (dir, side) =>
  (fs.existsSync(dir) ? fs.readdirSync(dir) : [])
    .filter((f) => f.endsWith('.schema.json'))
    .sort()
    .map((f) => {
      const stem = f.slice(0, -'.schema.json'.length);
      const part = stem.slice(stem.lastIndexOf('.') + 1); // params | result | notification | capability
      const name = `soba/${stem.slice(0, stem.lastIndexOf('.')).replaceAll('.', '/')}`;
      return { stem, part, name, side, schema: JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) };
    });
const files = [...schemaFiles(schemaDir, 'daemon'), ...schemaFiles(path.join(schemaDir, 'client'), 'client')];

// Named types from every file's $defs. The same name means the same type; when a params file
// (what clients send, optional fields may be left out) defines a name differently from a
// result file, its version is named `<Name>Input`.
const named = new Map(); // ts name -> schema
const order = (f) => (f.part === 'params' ? 1 : 0);
for (const f of [...files].sort((a, b) => order(a) - order(b) || a.stem.localeCompare(b.stem))) {
  f.names = {};
  for (const [def, schema] of Object.entries(f.schema.$defs ?? {})) {
    const same = (n) => named.has(n) && JSON.stringify(named.get(n)) === JSON.stringify(schema);
    let tsName = def;
    if (named.has(def) && !same(def)) {
      tsName = `${def}Input`;
      if (named.has(tsName) && !same(tsName)) {
        throw new Error(`${f.stem}: $defs/${def} differs from every earlier definition of that name`);
      }
    }
    named.set(tsName, schema);
    f.names[def] = tsName;
  }
}

const doc = (description, indent) => {
  if (!description) return '';
  const lines = description.split('\n');
  if (lines.length === 1) return `${indent}/** ${lines[0].replaceAll('*/', '*\\/')} */\n`;
  return `${indent}/**\n${lines.map((l) => `${indent} * ${l.replaceAll('*/', '*\\/')}`.trimEnd()).join('\n')}\n${indent} */\n`;
};

const KNOWN = new Set([
  '$schema', '$defs', '$ref', 'title', 'description', 'type', 'properties', 'required', 'items',
  'enum', 'const', 'anyOf', 'oneOf', 'allOf', 'additionalProperties',
  // Validation and annotation keywords with no TypeScript counterpart.
  'format', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'minLength', 'maxLength',
  'pattern', 'minItems', 'maxItems', 'uniqueItems', 'default', 'examples', 'deprecated', 'readOnly',
  'writeOnly',
]);

/** The TypeScript type of a schema node; `names` maps `$defs` names to generated names. */
function tsType(node, names, indent) {
  if (node === true || (typeof node === 'object' && Object.keys(node).every((k) => k === 'description'))) {
    return 'unknown';
  }
  for (const k of Object.keys(node)) {
    if (!KNOWN.has(k)) throw new Error(`unsupported schema keyword \`${k}\`; teach scripts/gen-types.mjs about it`);
  }
  const parts = [];
  if (node.$ref) {
    const def = node.$ref.replace('#/$defs/', '');
    if (!names[def]) throw new Error(`unresolved $ref ${node.$ref}`);
    parts.push(names[def]);
  }
  if (node.const !== undefined) {
    parts.push(JSON.stringify(node.const));
  } else if (node.enum) {
    parts.push(node.enum.map((v) => JSON.stringify(v)).join(' | '));
  } else if (node.type) {
    const types = Array.isArray(node.type) ? node.type : [node.type];
    const alts = types.map((t) => {
      switch (t) {
        case 'string':
          return 'string';
        case 'integer':
        case 'number':
          return 'number';
        case 'boolean':
          return 'boolean';
        case 'null':
          return 'null';
        case 'array':
          return `Array<${node.items ? tsType(node.items, names, indent) : 'unknown'}>`;
        case 'object':
          return objectType(node, names, indent);
        default:
          throw new Error(`unsupported type ${t}`);
      }
    });
    // An object whose members come from `$ref` and `oneOf` alone adds nothing of its own.
    const filtered = alts.filter((a) => !(a === '{}' && (node.$ref || node.oneOf || node.anyOf || node.allOf)));
    if (filtered.length) parts.push(filtered.length > 1 ? filtered.join(' | ') : filtered[0]);
  }
  for (const part of node.allOf ?? []) parts.push(tsType(part, names, indent));
  const variants = node.oneOf ?? node.anyOf;
  if (variants) {
    const inner = indent + '  ';
    const rendered = variants.map((v) => tsType(v, names, inner));
    if (rendered.every((r) => !r.includes('\n'))) {
      const union = rendered.join(' | ');
      parts.push(parts.length ? `(${union})` : union);
    } else {
      parts.push(`(\n${rendered.map((r) => `${inner}| ${r}`).join('\n')}\n${indent})`);
    }
  }
  if (!parts.length) return 'unknown';
  return parts.map((p) => (parts.length > 1 && p.includes(' | ') && !p.startsWith('(') ? `(${p})` : p)).join(' & ');
}

function objectType(node, names, indent) {
  const props = Object.entries(node.properties ?? {});
  const extra = node.additionalProperties;
  if (!props.length) {
    if (extra && extra !== true) return `Record<string, ${tsType(extra, names, indent)}>`;
    return node.oneOf || node.anyOf || node.allOf || node.$ref ? '{}' : 'Record<string, unknown>';
  }
  const required = new Set(node.required ?? []);
  const inner = indent + '  ';
  const body = props
    .map(([k, v]) => {
      const key = /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(k) ? k : JSON.stringify(k);
      return `${doc(v.description, inner)}${inner}${key}${required.has(k) ? '' : '?'}: ${tsType(v, names, inner)};`;
    })
    .join('\n');
  // Keys beyond the named ones (kept as sent): any type, so the named ones keep theirs.
  const rest = extra !== undefined && extra !== false ? ' & Record<string, unknown>' : '';
  return `{\n${body}\n${indent}}${rest}`;
}

const withoutKeys = (o, keys) => Object.fromEntries(Object.entries(o).filter(([k]) => !keys.includes(k)));

let out = `// Generated by scripts/gen-types.mjs from schemas/protocol/*.schema.json. Do not edit:
// change the daemon's types, regenerate the schemas, then run \`npm run gen\`.
/* eslint-disable */

`;
for (const [name, schema] of [...named.entries()].sort(([a], [b]) => a.localeCompare(b))) {
  const globalNames = Object.fromEntries([...named.keys()].map((n) => [n, n]));
  // $refs inside a named type resolve in the file it came from; the same names apply.
  const owner = files.find((f) => Object.values(f.names).includes(name) && f.schema.$defs);
  out += `${doc(schema.description, '')}export type ${name} = ${tsType(schema, owner ? owner.names : globalNames, '')};\n\n`;
}
const typeName = (f) => pascal(f.stem);
for (const f of files) {
  const { $defs, ...root } = f.schema;
  out += `${doc(`${f.schema.title}.${root.description ? `\n\n${root.description}` : ''}`, '')}export type ${typeName(f)} = ${tsType(withoutKeys(root, ['title', 'description', '$schema']), f.names, '')};\n\n`;
}
const methods = files.filter((f) => f.side === 'daemon' && f.part === 'params').map((f) => f.name);
const clientMethods = files.filter((f) => f.side === 'client' && f.part === 'params').map((f) => f.name);
const notifications = files.filter((f) => f.part === 'notification');
out += `/** Every request method: its params and result types. */\nexport interface Methods {\n`;
for (const m of methods) {
  const stem = m.slice('soba/'.length).replaceAll('/', '.');
  out += `  ${JSON.stringify(m)}: { params: ${pascal(`${stem}.params`)}; result: ${pascal(`${stem}.result`)} };\n`;
}
out += `}\n\n/** Every notification the daemon sends: its params type. */\nexport interface Notifications {\n`;
for (const f of notifications) out += `  ${JSON.stringify(f.name)}: ${typeName(f)};\n`;
out += `}\n\n/** Every request the daemon sends to a client that offered to serve it: its params and result types. */\nexport interface ClientMethods {\n`;
for (const m of clientMethods) {
  const stem = m.slice('soba/'.length).replaceAll('/', '.');
  out += `  ${JSON.stringify(m)}: { params: ${pascal(`${stem}.params`)}; result: ${pascal(`${stem}.result`)} };\n`;
}
out += `}\n\nexport type MethodName = keyof Methods;\nexport type NotificationName = keyof Notifications;\nexport type ClientMethodName = keyof ClientMethods;\n\n`;
out += `/** Every request method, in name order. */\nexport const METHODS: readonly MethodName[] = ${JSON.stringify(methods)};\n\n`;
out += `/** Every notification, in name order. */\nexport const NOTIFICATIONS: readonly NotificationName[] = ${JSON.stringify(notifications.map((f) => f.name))};\n`;

if (process.argv.includes('--check')) {
  const current = fs.existsSync(outFile) ? fs.readFileSync(outFile, 'utf8') : '';
  if (current !== out) {
    console.error('src/protocol.ts is out of date with schemas/protocol/; run `npm run gen` and commit it.');
    process.exit(1);
  }
} else {
  fs.writeFileSync(outFile, out);
}
