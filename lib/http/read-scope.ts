import {
  type IdempotencyError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyMissingError,
  IdempotencyTenantInvalidError,
} from '../shapes/idempotency.errors.js';
import {
  type IdempotencyRequest,
  type ResolvedIdempotencyOptions,
  type ResolvedRouteOptions,
} from '../shapes/idempotency-options.interface.js';
import { parseIdempotencyKey } from '../decisions/idempotency-key.js';
import { type RawKey } from '../decisions/key-source.js';
import { normalizeTenantId, readTenantId } from '../decisions/tenant-id.js';

/**
 * The two halves of a key's scope, read alike by every transport (an HTTP route, a GraphQL
 * field): the key its source gave, and the tenant the app's resolver gives. Each is a value or
 * the refusal, so that each adapter keeps its own order of steps around them (a GraphQL field
 * checks the key with its name appended before the tenant is asked).
 */

/** A request's key, or why it has none to claim: a refusal, or none on an optional key. */
export type KeyReading =
  | { kind: 'key'; key: string }
  /** No key on a route whose key is optional: it runs without one. */
  | { kind: 'keyless' }
  | { kind: 'refused'; error: IdempotencyError };

/** The tenant a request's key is scoped to, or the refusal of a tenant that is not one. */
export type TenantReading =
  { kind: 'tenant'; tenantId: string } | { kind: 'refused'; error: IdempotencyError };

/**
 * Reads the key its source gave (`route.key.read`, or an argument through `rawKey`): a value
 * the source already found invalid, a missing key (refused where the route requires one) and
 * a key that is not 1 to 255 visible characters are refusals that name where the key is read.
 */
export function readKey(given: RawKey, route: ResolvedRouteOptions): KeyReading {
  const parsed =
    typeof given === 'object' && !Array.isArray(given)
      ? ({ kind: 'invalid', reason: given.invalid } as const)
      : parseIdempotencyKey(given);
  if (parsed.kind === 'missing') {
    return route.required
      ? { kind: 'refused', error: new IdempotencyKeyMissingError(route.key.where) }
      : { kind: 'keyless' };
  }
  if (parsed.kind === 'invalid') {
    return {
      kind: 'refused',
      error: new IdempotencyKeyInvalidError(route.key.where, parsed.reason),
    };
  }
  return parsed;
}

/** Asks the app's resolver for the request's tenant, and refuses one that is not a tenant id. */
export function readTenant(
  request: IdempotencyRequest,
  tenant: ResolvedIdempotencyOptions['tenant'],
): TenantReading {
  const resolved = tenant(request);
  const tenantId = normalizeTenantId(resolved);
  if (tenantId !== undefined) return { kind: 'tenant', tenantId };
  const reading = readTenantId(resolved);
  const rule = reading.kind === 'invalid' ? reading.rule : undefined;
  return { kind: 'refused', error: new IdempotencyTenantInvalidError(resolved, rule) };
}
