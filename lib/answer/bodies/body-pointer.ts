import { createHash } from 'node:crypto';
import { type StoredResponse } from '../../shapes/stored-response.js';

/**
 * The reserved header that marks a response stored by pointer: its value says where the body
 * is, how long it is and its SHA-256, and the response's own body is left empty.
 */
export const BODY_POINTER_MARKER = '$body';

/** Where a large body is, and what it must be. */
export interface BodyPointer {
  id: string;
  length: number;
  /** Hex SHA-256 of the body. */
  sha256: string;
}

export function sha256Hex(body: Buffer): string {
  return createHash('sha256').update(body).digest('hex');
}

/** Whether a response goes out to the body store: larger than the threshold, and not already. */
export function storedByPointer(response: StoredResponse, overBytes: number): boolean {
  return response.body.length > overBytes && !(BODY_POINTER_MARKER in response.headers);
}

/** The response as the claim store keeps it: its headers and the pointer, no body. */
export function withPointer(response: StoredResponse, pointer: BodyPointer): StoredResponse {
  return {
    status: response.status,
    headers: { ...response.headers, [BODY_POINTER_MARKER]: JSON.stringify(pointer) },
    body: Buffer.alloc(0),
  };
}

/** The pointer a stored response carries; undefined when its body is inline. */
export function pointerOf(response: StoredResponse): BodyPointer | undefined | 'malformed' {
  const raw = response.headers[BODY_POINTER_MARKER];
  if (raw === undefined) return undefined;
  try {
    const parsed = JSON.parse(raw) as Partial<BodyPointer>;
    if (
      typeof parsed.id === 'string' &&
      Number.isSafeInteger(parsed.length) &&
      typeof parsed.sha256 === 'string' &&
      /^[0-9a-f]{64}$/.test(parsed.sha256)
    ) {
      return { id: parsed.id, length: parsed.length!, sha256: parsed.sha256 };
    }
  } catch {
    // falls through: a pointer that does not parse is as bad as a missing body
  }
  return 'malformed';
}

/**
 * Why a body fetched for a pointer is not the one that was stored, or undefined when it is.
 * A replay never sends a body that fails this: the client gets a 500 with the reason.
 */
export function bodyProblem(pointer: BodyPointer, body: Buffer | undefined): string | undefined {
  if (body === undefined) return `its body (${pointer.id}) is missing from the body store`;
  if (body.length !== pointer.length) {
    return `its body (${pointer.id}) is ${body.length} bytes, not the ${pointer.length} stored`;
  }
  if (sha256Hex(body) !== pointer.sha256) {
    return `its body (${pointer.id}) does not match the SHA-256 stored with the key`;
  }
  return undefined;
}

/** The response with its body put back and the pointer taken off. */
export function withBody(response: StoredResponse, body: Buffer): StoredResponse {
  const headers = { ...response.headers };
  delete headers[BODY_POINTER_MARKER];
  return { status: response.status, headers, body };
}
