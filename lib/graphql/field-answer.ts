import * as nestCommon from '@nestjs/common';
import { configure } from 'safe-stable-stringify';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type ErrorLocation, errorLocations, errorPath } from './error-location.js';
import { defineOwn } from './own-member.js';

/**
 * JSON of what an error carries, whatever it holds: a cycle (an HTTP client's error kept as
 * the cause, its request and response pointing at each other) left out, a `BigInt` as its
 * digits, keys in their own order. `JSON.stringify` throws on both, and an error that cannot
 * be written must still be stored, or its transaction and key would be left held.
 */
const errorJson = configure({ circularValue: undefined, bigint: true, deterministic: false });

/** `value` as the JSON written of it reads back (see `errorJson`). */
function jsonCopy(value: unknown): unknown {
  const written = errorJson(value);
  return written === undefined ? null : (JSON.parse(written) as unknown);
}

/**
 * A resolver's error as it is stored: what the drivers put in the answer's `errors` entry
 * (`message`, `extensions`), and what an exception filter or Nest's Apollo driver reads of a
 * Nest `HttpException` (its status and response), so that the replay renders the same entry.
 * `path` and `locations` are not stored: GraphQL gives the replay the same ones, as the record
 * is the same field of the same operation.
 */
export interface FieldError {
  /** What was thrown: a `GraphQLError`, a Nest `HttpException`, or another `Error`. */
  kind: 'graphql' | 'http' | 'error';
  message: string;
  /** The error's `name`, when it is not the plain `Error`'s. */
  name?: string;
  extensions?: Record<string, unknown>;
  /** An `HttpException`'s `getStatus()` and `getResponse()`. */
  http?: { status: number; response: unknown };
  /**
   * The entries of `extensions.http.headers`, a `Map` (Apollo Server's way to answer an error
   * with headers, a `Retry-After` say), which JSON would write as `{}`: the replay gets a `Map`
   * of them back.
   */
  httpHeaders?: [string, string][];
  /**
   * Set on a field's failure (`FAILED`) that was a Promise's rejection, not a getter's throw:
   * a replay gives a Promise that rejects, which an outer layer copying the value (Nest's
   * `ClassSerializerInterceptor`) passes on for GraphQL to await, as at the first answer.
   */
  rejected?: true;
  /** The error's own `statusCode` (Mercurius' `ErrorWithProps`), the answer's HTTP status. */
  statusCode?: number;
  /**
   * Its other own properties, as JSON (a driver's `code`, `constraint`, Prisma's `meta`, an
   * app exception's `declineCode`): an app's `formatError` that maps a unique violation by
   * `code === '23505'`, or reads `meta.modelName`, maps the replay too.
   */
  props?: Record<string, unknown>;
  /** It was one of `@nestjs/common`'s own exception classes (`ConflictException`), by name. */
  nestClass?: true;
  /**
   * A `GraphQLError`'s own `locations` (made from the `nodes` it was given: the argument it
   * refuses, say), which graphql-js keeps over the field's: the replay's error has them again.
   */
  locations?: ErrorLocation[];
  /** A `GraphQLError`'s own `path` (one passed on from a GraphQL call), kept by graphql-js too. */
  path?: (string | number)[];
}

/**
 * What a mutation field answered: its resolver's value, or an error. A stored value says the
 * form it was stored in (`ANSWER_FORMAT`); one stored before that said none (form 1).
 */
export type FieldAnswer = DataAnswer | { kind: 'error'; error: FieldError };

/**
 * A value. Where field middleware may run under it (middleware-outputs.ts): `pending` while
 * the operation's answer has not given its outputs yet (committed with the resolver's
 * effects, before the fields under it resolved), then `outputs` (and `members`), each output
 * as the answer held it, by its path under the mutation's field (`relativeKey`). A record
 * stored before them has neither, and its middleware runs on a replay, as it did then.
 */
export interface DataAnswer {
  kind: 'data';
  data: unknown;
  format?: number;
  pending?: true;
  /** Its outputs will never come (too large to store, or no answer hook): a replay says so. */
  outputsLost?: true;
  outputs?: Record<string, unknown>;
  members?: Record<string, string>;
  /**
   * The errors a middleware field's output answered with (a null in it, or the output itself
   * null), each by its own path's key under the mutation's field (`tags`, `tags.1`).
   */
  errors?: Record<string, StoredFieldError>;
  /** Each output's key by its named key (field names and arguments: named-path.ts). */
  names?: Record<string, string>;
  /** The named keys `names` does not point to (another alias of a field), by key. */
  told?: Record<string, string>;
  /** The middleware fields nulled from above, each the key of the error that nulled it. */
  nulled?: Record<string, string>;
  /** The kept own data of app-resolved fields' parents in the outputs (`StoredOutputs`). */
  parents?: Record<string, unknown>;
  /**
   * Their data, one typed graph (each of `parents` names its node: app-parents.ts). A record
   * stored before it holds each parent's own graph under its key.
   */
  outputsGraph?: unknown;
  /** The middleware fields completed but not kept (see `StoredOutputs.lost`): pending. */
  lost?: string[];
  /**
   * The own data of the value's parents (each `__parent` names its node: parent-graph.ts), one
   * typed graph for the whole answer. A record stored before it holds each parent's data under
   * its `__parent`. An earlier version of the library reads no such record (see the GraphQL
   * guide's "Keys stored before this form").
   */
  parentGraph?: unknown;
}

/**
 * An error at or under a middleware field's output as the first answer had it, before any
 * `formatError`: graphql-js's words (`message`, `extensions`), and what was thrown (its
 * `originalError`, stored as a resolver's error is: an `HttpException` is thrown again as one,
 * which Nest's Apollo driver renders by its status). A record stored before `thrown` was has
 * the words only, and is answered as a `GraphQLError` of them.
 */
export interface StoredFieldError {
  message: string;
  extensions?: Record<string, unknown>;
  /** What the field threw; none for graphql-js's own error (a null on a non-null field). */
  thrown?: FieldError;
  /**
   * Its `locations`, kept for an error under the field (an item of its list): a replay makes
   * it there again, past the field it is thrown at.
   */
  locations?: ErrorLocation[];
}

/**
 * The form a value is stored in, read back by `fromWire` (wire-value.ts). 3: the value as far
 * as the first call selected it, each object with the fields it selected (a retry that selects
 * another is refused on that field); the forms before it hold every field of the type. 2: each
 * object keeps
 * its data that is not a field, and the fields its scalars do not give back, as typed JSON
 * (a `Date` a `Date` again, a `BigInt` a `BigInt`). 1, before it: that data as JSON beside the
 * fields, which a replay of a key stored then still reads so.
 */
export const ANSWER_FORMAT = 3;

/** The media type of a stored field answer: no HTTP route stores one, and none is sent. */
export const FIELD_ANSWER_TYPE = 'application/vnd.nestjs-idempotency.graphql-field+json';

/** The status a field's answer is stored with (what `storeIf` and the events see). */
export function answerStatus(answer: FieldAnswer): number {
  if (answer.kind === 'data') return 200;
  return answer.error.http?.status ?? 500;
}

/**
 * A field's answer as the record the store keeps: the value in its wire form (see
 * `wire-value.ts`, which the replays turn back), kept as JSON.
 *
 * @throws TypeError when the value is not JSON (a `BigInt`, a cycle)
 */
export function encodeAnswer(answer: FieldAnswer): StoredResponse {
  const body =
    answer.kind === 'data'
      ? JSON.stringify({
          data: answer.data ?? null,
          format: answer.format ?? ANSWER_FORMAT,
          ...(answer.pending ? { pending: true } : {}),
          ...(answer.outputsLost ? { outputsLost: true } : {}),
          ...(answer.outputs ? { outputs: answer.outputs } : {}),
          ...(answer.members ? { members: answer.members } : {}),
          ...(answer.errors ? { errors: answer.errors } : {}),
          ...(answer.names ? { names: answer.names } : {}),
          ...(answer.told ? { told: answer.told } : {}),
          ...(answer.nulled ? { nulled: answer.nulled } : {}),
          ...(answer.lost ? { lost: answer.lost } : {}),
          ...(answer.parents ? { parents: answer.parents } : {}),
          ...(answer.outputsGraph ? { outputsGraph: answer.outputsGraph } : {}),
          ...(answer.parentGraph ? { parentGraph: answer.parentGraph } : {}),
        })
      : JSON.stringify({ error: answer.error });
  return {
    status: answerStatus(answer),
    headers: { 'content-type': FIELD_ANSWER_TYPE },
    body: Buffer.from(body),
  };
}

/** A stored record read back as a field's answer; undefined when it is not one. */
export function decodeAnswer(stored: StoredResponse): FieldAnswer | undefined {
  if (stored.headers['content-type'] !== FIELD_ANSWER_TYPE) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(stored.body.toString('utf8'));
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  if ('data' in parsed) {
    const {
      format,
      pending,
      outputsLost,
      outputs,
      members,
      errors,
      names,
      told,
      nulled,
      lost,
      parents,
      outputsGraph,
      parentGraph,
    } = parsed as {
      format?: unknown;
      pending?: unknown;
      outputsLost?: unknown;
      outputs?: unknown;
      members?: unknown;
      errors?: unknown;
      names?: unknown;
      told?: unknown;
      nulled?: unknown;
      lost?: unknown;
      parents?: unknown;
      outputsGraph?: unknown;
      parentGraph?: unknown;
    };
    const answer: DataAnswer = {
      kind: 'data',
      data: parsed.data,
      format: typeof format === 'number' ? format : 1,
    };
    if (pending === true) answer.pending = true;
    if (outputsLost === true) answer.outputsLost = true;
    if (isRecord(outputs)) answer.outputs = outputs;
    if (isRecord(members)) answer.members = members as Record<string, string>;
    if (isRecord(errors)) answer.errors = errors as Record<string, StoredFieldError>;
    if (isRecord(names)) answer.names = names as Record<string, string>;
    if (isRecord(told)) answer.told = told as Record<string, string>;
    if (isRecord(nulled)) answer.nulled = nulled as Record<string, string>;
    if (Array.isArray(lost) && lost.every((key) => typeof key === 'string')) {
      answer.lost = lost as string[];
    }
    if (isRecord(parents)) answer.parents = parents;
    if (isRecord(outputsGraph)) answer.outputsGraph = outputsGraph;
    if (isRecord(parentGraph)) answer.parentGraph = parentGraph;
    return answer;
  }
  const error = (parsed as { error?: FieldError }).error;
  if (typeof error?.message !== 'string') return undefined;
  return { kind: 'error', error };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** What a resolver threw, as it is stored (see `FieldError`). */
export function fieldError(thrown: unknown): FieldError {
  if (!(thrown instanceof Error)) return { kind: 'error', message: String(thrown) };
  const error: FieldError = { kind: 'error', message: thrown.message };
  if (thrown.name !== 'Error') error.name = thrown.name;
  const extensions = (thrown as { extensions?: unknown }).extensions;
  if (typeof extensions === 'object' && extensions !== null && !Array.isArray(extensions)) {
    // Kept as the JSON the drivers write of them.
    const copy = (jsonCopy(extensions) ?? {}) as Record<string, unknown>;
    const headers = httpHeadersOf(extensions);
    if (headers) {
      error.httpHeaders = headers;
      delete (copy.http as Record<string, unknown> | undefined)?.headers;
    }
    if (Object.keys(copy).length > 0) error.extensions = copy;
  }
  const statusCode = (thrown as { statusCode?: unknown }).statusCode;
  if (typeof statusCode === 'number') error.statusCode = statusCode;
  const http = httpExceptionOf(thrown);
  const props = propsOf(thrown, http !== undefined);
  if (props) error.props = props;
  if (http && isNestException(thrown)) error.nestClass = true;
  if (http) {
    error.kind = 'http';
    error.http = http;
  } else if (thrown.name === 'GraphQLError') {
    error.kind = 'graphql';
    keepOwnPlace(error, thrown);
  }
  return error;
}

/**
 * A `GraphQLError`'s own `locations` and `path`, stored apart (not among `props`): graphql-js
 * answers it there, not at the field, and so must the replay (adversary 74).
 */
function keepOwnPlace(error: FieldError, thrown: Error): void {
  const { locations, path } = thrown as { locations?: unknown; path?: unknown };
  const ownLocations = errorLocations(locations);
  const ownPath = errorPath(path);
  if (ownLocations) error.locations = ownLocations;
  if (ownPath) error.path = ownPath;
  if (error.props) {
    delete error.props.locations;
    delete error.props.path;
    if (Object.keys(error.props).length === 0) delete error.props;
  }
}

/** The entries of `extensions.http.headers` when it is a `Map` (see `FieldError`). */
function httpHeadersOf(extensions: object): [string, string][] | undefined {
  const http = (extensions as { http?: unknown }).http;
  const headers = (http as { headers?: unknown } | null | undefined)?.headers;
  if (!(headers instanceof Map)) return undefined;
  return [...(headers as Map<unknown, unknown>)].map(([name, value]) => [
    String(name),
    String(value),
  ]);
}

/** Nest's `HttpException`, recognised by its shape: the library does not tie it to a class. */
function httpExceptionOf(error: Error): FieldError['http'] {
  const candidate = error as { getStatus?: unknown; getResponse?: unknown };
  if (typeof candidate.getStatus !== 'function' || typeof candidate.getResponse !== 'function') {
    return undefined;
  }
  const status = (candidate.getStatus as () => unknown).call(error);
  if (typeof status !== 'number') return undefined;
  const response = (candidate.getResponse as () => unknown).call(error);
  return { status, response: jsonCopy(response ?? null) };
}

/** What `FieldError.props` keeps: the error's own properties, other than those stored apart. */
const STORED_APART = new Set(['message', 'name', 'stack', 'extensions', 'statusCode']);
/** What an `HttpException` is made of again: its response and status (and their options). */
const HTTP_EXCEPTION_OWN = new Set(['response', 'status', 'options', 'cause']);

/**
 * An error's own enumerable properties, each as its JSON (one JSON cannot write, a function
 * or a cycle, is left out), apart from what is stored otherwise.
 */
function propsOf(thrown: Error, httpException: boolean): Record<string, unknown> | undefined {
  let props: Record<string, unknown> | undefined;
  for (const [name, value] of Object.entries(thrown)) {
    if (STORED_APART.has(name) || (httpException && HTTP_EXCEPTION_OWN.has(name))) continue;
    // An inner error (`cause`) writes as `{}`: nothing a formatter could read.
    if (value === undefined || typeof value === 'function' || value instanceof Error) continue;
    const written = errorJson(value);
    if (written === undefined) continue;
    defineOwn((props ??= {}), name, JSON.parse(written) as unknown);
  }
  return props;
}

/** Whether `thrown` is made by the `@nestjs/common` subclass of `HttpException` its name names. */
function isNestException(thrown: Error): boolean {
  const exported = (nestCommon as Record<string, unknown>)[thrown.name];
  return (
    typeof exported === 'function' &&
    exported !== nestCommon.HttpException &&
    thrown.constructor === exported
  );
}
