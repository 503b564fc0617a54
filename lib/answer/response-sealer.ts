import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type KeyScope } from '../shapes/claim-store.interface.js';
import { type SealingKey } from '../shapes/sealing-key.js';
export { type SealingKey } from '../shapes/sealing-key.js';

/**
 * Why a stored response could not be opened. Never a wrong body: the replay is a 500 that
 * names this reason.
 */
export class SealedResponseError extends Error {
  constructor(
    reason: string,
    /** What only the log shows (a key id). */
    readonly detail?: string,
  ) {
    super(reason);
    this.name = 'SealedResponseError';
  }
}

/** The reserved header that marks a sealed row: its headers travel inside the ciphertext. */
export const SEALED_MARKER = '$sealed';
const VERSION = 1;
const IV_BYTES = 12;
const TAG_BYTES = 16;

/**
 * Stored responses encrypted at rest with AES-256-GCM (opt-in): payment responses carry
 * personal data, and the key table is copied into backups and replicas. The tenant and the
 * key are the associated data, so a sealed body copied under another key does not open. The
 * first key seals; every key opens, so keys rotate by putting the new one first and dropping
 * the old one once the retention has passed.
 *
 * A sealed row: `response_headers` is `{"$sealed": "<version>"}` and `response_body` is
 * `version | key id length | key id | iv | tag | ciphertext of (headers JSON length | headers
 * JSON | body)`. Rows stored before sealing was turned on are read as they are.
 */
export class ResponseSealer {
  private readonly byId: Map<string, Buffer>;

  constructor(private readonly keys: readonly SealingKey[]) {
    this.byId = new Map(keys.map(({ id, key }) => [id, key]));
  }

  seal(scope: KeyScope, response: StoredResponse): StoredResponse {
    const { id, key } = this.keys[0];
    const headers = Buffer.from(JSON.stringify(response.headers));
    const length = Buffer.alloc(4);
    length.writeUInt32BE(headers.length);
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(associatedData(scope, response.status));
    const sealed = Buffer.concat([
      cipher.update(length),
      cipher.update(headers),
      cipher.update(response.body),
      cipher.final(),
    ]);
    const keyId = Buffer.from(id);
    return {
      status: response.status,
      headers: { [SEALED_MARKER]: String(VERSION) },
      body: Buffer.concat([
        Buffer.from([VERSION, keyId.length]),
        keyId,
        iv,
        cipher.getAuthTag(),
        sealed,
      ]),
    };
  }

  /** Opens a stored response; one stored unsealed is returned as it is. */
  open(scope: KeyScope, stored: StoredResponse): StoredResponse {
    if (!(SEALED_MARKER in stored.headers)) return stored;
    const body = stored.body;
    if (body.length < 2 || body[0] !== VERSION) {
      throw new SealedResponseError('the stored response is sealed in an unknown format');
    }
    const idEnd = 2 + body[1];
    if (body.length < idEnd + IV_BYTES + TAG_BYTES + 4) {
      throw new SealedResponseError('the stored response is sealed, but cut short');
    }
    const id = body.subarray(2, idEnd).toString();
    const key = this.byId.get(id);
    if (!key) {
      // The id is the operator's to see, in the log; the client learns only the reason.
      throw new SealedResponseError(
        'the stored response is sealed with a key that is not among the configured keys',
        `key id "${id}"`,
      );
    }
    const iv = body.subarray(idEnd, idEnd + IV_BYTES);
    const tag = body.subarray(idEnd + IV_BYTES, idEnd + IV_BYTES + TAG_BYTES);
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
      decipher.setAAD(associatedData(scope, stored.status));
      decipher.setAuthTag(tag);
      const plain = Buffer.concat([
        decipher.update(body.subarray(idEnd + IV_BYTES + TAG_BYTES)),
        decipher.final(),
      ]);
      const headersEnd = 4 + plain.readUInt32BE(0);
      return {
        status: stored.status,
        headers: JSON.parse(plain.subarray(4, headersEnd).toString()) as Record<string, string>,
        body: plain.subarray(headersEnd),
      };
    } catch {
      throw new SealedResponseError(
        'the stored response does not authenticate: it was altered, or copied from another key',
      );
    }
  }
}

/** The row's identity and its status, bound to its ciphertext. */
function associatedData(scope: KeyScope, status: number): Buffer {
  return Buffer.from(`${scope.tenantId}\u0000${scope.key}\u0000${status}`);
}
