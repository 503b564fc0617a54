import { type IdempotencyKeySource, type KeyReader, type RawKey } from '../shapes/key-source.js';
export { type IdempotencyKeySource, type KeyReader, type RawKey } from '../shapes/key-source.js';

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const FIELD_PATH = /^[^.]+(\.[^.]+)*$/;
/** A GraphQL name, as the spec spells an argument's. */
const GRAPHQL_NAME = /^[_A-Za-z][_0-9A-Za-z]*$/;

/**
 * Resolves a key source, or throws a message (the option's validation) when it is malformed.
 * Pure: it runs once per route, at start-up.
 */
export function keyReader(source: IdempotencyKeySource): KeyReader {
  if ('header' in source) {
    if (typeof source.header !== 'string' || !HEADER_NAME.test(source.header)) {
      throw new Error(`keyFrom.header ${JSON.stringify(source.header)} is not a header name`);
    }
    const key = source.header.toLowerCase();
    return {
      where: `the ${source.header} header`,
      header: source.header,
      read: (request) => request.headers[key],
    };
  }
  if ('body' in source) {
    if (typeof source.body !== 'string' || !FIELD_PATH.test(source.body)) {
      throw new Error(
        `keyFrom.body ${JSON.stringify(source.body)} is not a field name or a dotted path`,
      );
    }
    const path = source.body.split('.');
    return {
      where: `the ${source.body} field of the body`,
      read: (request) => rawKey(at(request.body, path)),
    };
  }
  if ('arg' in source) {
    if (typeof source.arg !== 'string' || !GRAPHQL_NAME.test(source.arg)) {
      throw new Error(`keyFrom.arg ${JSON.stringify(source.arg)} is not a GraphQL argument name`);
    }
    return { where: `the ${source.arg} argument`, arg: source.arg, read: () => undefined };
  }
  if (typeof source.read !== 'function' || typeof source.name !== 'string' || !source.name) {
    throw new Error('keyFrom needs { header }, { body }, { name, read } or { arg }');
  }
  const { name, read } = source;
  return { where: name, read: (request) => rawKey(read(request)) };
}

/** The key reader of the default source: the module's key header. */
export function headerKeyReader(headerName: string): KeyReader {
  return keyReader({ header: headerName });
}

/**
 * What a body field or a function gave, as the key parser takes it: a string, or nothing. A
 * number in a JSON body is a key as written; anything else (an object, a list, a boolean) is
 * not a key, and is reported as invalid rather than coerced.
 */
export function rawKey(value: unknown): RawKey {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') return value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  return {
    invalid: `it is ${kindOf(value)}, not a string`,
  };
}

function at(body: unknown, path: string[]): unknown {
  let value = body;
  for (const field of path) {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
    if (!Object.prototype.hasOwnProperty.call(value, field)) return undefined;
    value = (value as Record<string, unknown>)[field];
  }
  return value;
}

function kindOf(value: unknown): string {
  if (Array.isArray(value)) return 'a list';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}
