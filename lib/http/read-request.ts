import { InvalidJsonError } from '../fingerprint/canonical-json.js';
import { computeFingerprint, fingerprintInput } from '../fingerprint/fingerprint.js';
import { UnreadBodyError } from '../fingerprint/unseen-body.js';
import {
  type IdempotencyError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyMissingError,
  IdempotencyRequestInvalidError,
  IdempotencyTenantInvalidError,
} from '../idempotency.errors.js';
import {
  type IdempotencyRequest,
  type ResolvedIdempotencyOptions,
  type ResolvedRouteOptions,
} from '../idempotency-options.interface.js';
import { parseIdempotencyKey } from '../idempotency-key.js';
import { type KeyScope } from '../storage/claim-store.interface.js';
import { normalizeTenantId } from '../tenant-id.js';

/** What a request is to the library, before any store is asked. */
export type RequestReading =
  /** Its key and its fingerprint: it is claimed (or decided against what the key holds). */
  | { kind: 'keyed'; scope: KeyScope; fingerprint: Buffer }
  /** No key on a route whose key is optional: it runs without one. */
  | { kind: 'keyless' }
  /** Refused before any claim; `warning` is for the app's log, not the client. */
  | { kind: 'refused'; error: IdempotencyError; warning?: string };

/**
 * Reads the request's key, tenant and fingerprint, in that order, into a value: the first one
 * that is missing or invalid is the refusal. `name` is the route's, for the log.
 */
export function readRequest(
  request: IdempotencyRequest,
  route: ResolvedRouteOptions,
  tenant: ResolvedIdempotencyOptions['tenant'],
  name: string,
): RequestReading {
  const given = route.key.read(request);
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
  const resolved = tenant(request);
  const tenantId = normalizeTenantId(resolved);
  if (tenantId === undefined) {
    return { kind: 'refused', error: new IdempotencyTenantInvalidError(resolved) };
  }
  const scope: KeyScope = { tenantId, key: parsed.key };
  try {
    return {
      kind: 'keyed',
      scope,
      fingerprint: computeFingerprint(fingerprintInput(request, route)),
    };
  } catch (error) {
    // A body the parser took but that is not one JSON value (duplicate keys, say).
    if (error instanceof InvalidJsonError) {
      return { kind: 'refused', error: new IdempotencyRequestInvalidError(error.message) };
    }
    // A body no parser read: a type the app does not take, or an upload read too late.
    if (error instanceof UnreadBodyError) {
      return {
        kind: 'refused',
        error: new IdempotencyRequestInvalidError(error.message),
        warning:
          `${name}: refused a request (400), ${error.message}, so the fingerprint ` +
          `would leave its body out; if the route takes such bodies: ${error.advice}`,
      };
    }
    throw error;
  }
}
