import { canonicalizeValue, InvalidJsonError } from '../fingerprint/canonical-json.js';
import { computeFingerprint } from '../fingerprint/fingerprint.js';
import { type GraphQLResolveInfo } from 'graphql';
import { type IdempotencyRequest } from '../shapes/idempotency-request.js';
import { MAX_KEY_LENGTH } from '../shapes/idempotency.constants.js';
import {
  type IdempotencyError,
  IdempotencyKeyInvalidError,
  IdempotencyRequestInvalidError,
} from '../shapes/idempotency.errors.js';
import {
  type ResolvedIdempotencyOptions,
  type ResolvedRouteOptions,
} from '../shapes/idempotency-options.interface.js';
import { rawKey } from '../decisions/key-source.js';
import { longerThan } from '../decisions/well-formed.js';
import { type KeyScope } from '../shapes/claim-store.interface.js';
import { readKey, readTenant } from '../http/read-scope.js';
import { type GraphqlField } from './graphql-field.js';
import { type GraphqlModule } from './graphql-module.js';
import { ArgumentValueInvalidError, argumentsWire, NotJsonArgumentError } from './wire-value.js';

/** What a mutation field is to the library, before any store is asked. */
export type FieldReading =
  | { kind: 'keyed'; scope: KeyScope; fingerprint: Buffer }
  /** No key on a mutation whose key is optional: it runs without one. */
  | { kind: 'keyless' }
  | { kind: 'refused'; error: IdempotencyError };

/**
 * The method that stands in the fingerprint of a GraphQL field: no HTTP method is spelled so,
 * so a field's fingerprint never equals a route's, even under one key.
 */
export const GRAPHQL_FINGERPRINT_METHOD = 'GRAPHQL';

/** A request with nothing in it, for a transport whose context holds none (the key is an argument). */
const NO_REQUEST: IdempotencyRequest = { method: 'POST', url: '', headers: {} };

/** Why a key of the whole request is refused in a batched request. */
const BATCH_SHARED =
  'it is shared by every operation of a batched request (several operations in one HTTP ' +
  "request), so it cannot name each one's mutation: give each call its key in an argument " +
  '(keyFrom: { arg }), or send the operations one per request';

/**
 * Reads a mutation field's key, tenant and fingerprint, in that order, into a value: the first
 * one that is missing or invalid is the refusal.
 *
 * Each field is a record of its own. A key from an argument names its field's operation
 * itself; a key of the whole operation (a header, a body field, a function of the request) is
 * stored with the field's name in the answer (`key:alias`), so that two aliased calls of one
 * mutation under one header are two records, and a retry of the operation finds each again.
 * The fingerprint is the field's name and its arguments as canonical JSON, never the query
 * text, whose white space and variables vary between honest retries. The arguments are
 * taken in the form GraphQL writes them (`graphql` walks their types): a value that has none
 * (an upload) is refused, never fingerprinted as `{}`.
 */
export function readField(
  field: GraphqlField,
  route: ResolvedRouteOptions,
  tenant: ResolvedIdempotencyOptions['tenant'],
  graphql?: GraphqlModule,
): FieldReading {
  const sent = field.request ?? NO_REQUEST;
  const { arg } = route.key;
  const batch =
    arg === undefined && Array.isArray(sent.body) ? (sent.body as unknown[]) : undefined;
  // A batch (several operations in one HTTP request, Apollo's and Mercurius' JSON array)
  // shares the request's headers and body: a key of the whole request would name two
  // operations of one field, and the second would be answered with the first's payment.
  // With no key anywhere in it there is nothing to share: an optional key runs keyless, a
  // required one is missing, as for a single operation (adversary 74).
  if (batch && batch.length !== 1) {
    if (batchHoldsKey(sent, batch, route)) {
      return {
        kind: 'refused',
        error: new IdempotencyKeyInvalidError(route.key.where, BATCH_SHARED),
      };
    }
    const none = readKey(undefined, route);
    if (none.kind !== 'key') return none;
  }
  // A batch of one operation (Apollo Client's BatchHttpLink sends each operation whose
  // headers differ as an array of its own): the request is that operation's alone, read as
  // if sent by itself (a key or tenant in the body is that operation's).
  const request: IdempotencyRequest = batch
    ? (Object.create(sent, { body: { value: batch[0], enumerable: true } }) as IdempotencyRequest)
    : sent;
  // The key argument by its name in the schema: Nest renames an `@ArgsType()` class's
  // arguments to its properties before the resolver (`@Field({ name: 'idempotencyKey' })
  // key`), so the resolver's own args may not have it under that name (adversary 70).
  // Read once, for the key and the fingerprint (two coercions of the variables otherwise).
  const args = argumentValues(graphql, field, request) ?? field.args;
  const given = arg === undefined ? route.key.read(request) : rawKey(args[arg]);
  const read = readKey(given, route);
  if (read.kind !== 'key') return read;
  // A key of the whole operation is one per field: see above.
  const key = arg === undefined ? `${read.key}:${field.responseKey}` : read.key;
  if (longerThan(key, MAX_KEY_LENGTH)) {
    const reason =
      `with the field's name in the answer ("${field.responseKey}") after it, it is longer ` +
      `than ${MAX_KEY_LENGTH} characters`;
    return { kind: 'refused', error: new IdempotencyKeyInvalidError(route.key.where, reason) };
  }
  const tenancy = readTenant(request, tenant);
  if (tenancy.kind === 'refused') return tenancy;
  try {
    return {
      kind: 'keyed',
      scope: { tenantId: tenancy.tenantId, key },
      fingerprint: fieldFingerprint(field, route, request, graphql, args),
    };
  } catch (error) {
    // Arguments deeper, or with more members, than the route's JSON limits allow, not JSON, or
    // not valid for their type.
    if (
      error instanceof InvalidJsonError ||
      error instanceof NotJsonArgumentError ||
      error instanceof ArgumentValueInvalidError
    ) {
      return { kind: 'refused', error: new IdempotencyRequestInvalidError(error.message) };
    }
    throw error;
  }
}

/**
 * Whether a batched request holds a key of the whole request anywhere: read from the request
 * as sent (a header) and from each operation read as if sent alone (a body field), so that a
 * key in one operation's body is never taken for none and run without it.
 */
function batchHoldsKey(
  sent: IdempotencyRequest,
  batch: readonly unknown[],
  route: ResolvedRouteOptions,
): boolean {
  const each = batch.map(
    (body) =>
      Object.create(sent, { body: { value: body, enumerable: true } }) as IdempotencyRequest,
  );
  return [sent, ...each].some((request) => route.key.read(request) !== undefined);
}

/**
 * SHA-256 over the field's name, the route's fingerprinted headers and its canonical arguments.
 *
 * @throws NotJsonArgumentError for an argument value that is not JSON (see `argumentsWire`)
 * @throws ArgumentValueInvalidError for an argument value its scalar refuses
 */
export function fieldFingerprint(
  field: GraphqlField,
  route: ResolvedRouteOptions,
  request: IdempotencyRequest = field.request ?? NO_REQUEST,
  graphql?: GraphqlModule,
  args: Record<string, unknown> = argumentValues(graphql, field, request) ?? field.args,
): Buffer {
  const headers = route.fingerprintHeaders.map((name) => {
    const value = request.headers[name];
    return `${name}:${Array.isArray(value) ? value.join(',') : (value ?? '')}`;
  });
  return computeFingerprint({
    method: GRAPHQL_FINGERPRINT_METHOD,
    path: `${field.operation} ${field.fieldName}`,
    headers,
    body: canonicalizeValue(argumentsWire(graphql, field.types?.args, args), route.json),
  });
}

/**
 * The field's arguments as graphql-js coerces them, by their names in the schema, from its
 * node and the operation's variables as graphql-js coerces what the client sent: the same
 * whichever executor ran it. graphql-jit (Mercurius' `jit`, from a document's second run)
 * gives `null` for a variable left out inside an input literal where graphql-js leaves the
 * member out (adversary 69), and a variable's default as its JSON (a `DateTime` default an
 * ISO string, which the scalar writes as null: adversary 70), so a retry would meet its own
 * first run's key with another fingerprint. Undefined where they cannot be read so.
 */
function argumentValues(
  graphql: GraphqlModule | undefined,
  field: GraphqlField,
  request: IdempotencyRequest,
): Record<string, unknown> | undefined {
  const info = field.types?.call.info;
  if (!graphql || !info) return undefined;
  try {
    const definition = info.parentType.getFields()[info.fieldName];
    const [node] = info.fieldNodes;
    if (!definition || !node) return undefined;
    return graphql.getArgumentValues(
      definition,
      node,
      sentVariables(graphql, info, operationBody(request, field.types?.call.context)) ??
        info.variableValues,
    );
  } catch {
    return undefined;
  }
}

/**
 * The body of the field's own operation: the request's, or in a batch (a JSON array of
 * operations) its entry, by Mercurius' index of it in the context (`operationId`, set with
 * `operationsCount` on each operation of a batch: a batch may send one document twice).
 * Undefined elsewhere: the executor's variables are all there is (on Apollo, graphql-js's
 * own, which its batches run on; an entry told by its text could be another's: a persisted
 * query's entry has none, adversary 73).
 */
function operationBody(request: IdempotencyRequest, context: unknown): unknown {
  const { body } = request;
  if (!Array.isArray(body)) return body;
  const { operationId, operationsCount } = (context ?? {}) as {
    operationId?: unknown;
    operationsCount?: unknown;
  };
  // Mercurius' own: both set, the count the batch's (an app's field of that name is not).
  if (
    typeof operationId !== 'number' ||
    !Number.isInteger(operationId) ||
    operationsCount !== body.length
  ) {
    return undefined;
  }
  return body[operationId] as unknown;
}

/** The operation's variables as graphql-js coerces the ones its request sent, with their defaults. */
function sentVariables(
  graphql: GraphqlModule,
  info: GraphQLResolveInfo,
  sent: unknown,
): Record<string, unknown> | undefined {
  // Only a body that is the operation's own (`{ query, variables }`): over a transport whose
  // request holds no operation (a WebSocket), the executor's variables are all there is.
  const body = sent as { query?: unknown; variables?: unknown } | undefined;
  if (!body || typeof body !== 'object' || Array.isArray(body)) return undefined;
  if (!('query' in body) && !('variables' in body)) return undefined;
  const inputs = body.variables ?? {};
  if (typeof inputs !== 'object' || Array.isArray(inputs)) return undefined;
  const coerced = graphql.getVariableValues(
    info.schema,
    info.operation.variableDefinitions ?? [],
    inputs as Record<string, unknown>,
  );
  return coerced.coerced;
}
