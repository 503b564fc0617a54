import { InvalidJsonError } from '../fingerprint/canonical-json.js';
import { computeFingerprint, fingerprintInput } from '../fingerprint/fingerprint.js';
import { UnreadBodyError } from '../fingerprint/unseen-body.js';
import {
  type IdempotencyError,
  IdempotencyRequestInvalidError,
} from '../shapes/idempotency.errors.js';
import {
  type IdempotencyRequest,
  type ResolvedIdempotencyOptions,
  type ResolvedRouteOptions,
} from '../shapes/idempotency-options.interface.js';
import { type KeyScope } from '../shapes/claim-store.interface.js';
import { readKey, readTenant } from './read-scope.js';

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
  const key = readKey(route.key.read(request), route);
  if (key.kind !== 'key') return key;
  const tenancy = readTenant(request, tenant);
  if (tenancy.kind === 'refused') return tenancy;
  const scope: KeyScope = { tenantId: tenancy.tenantId, key: key.key };
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
