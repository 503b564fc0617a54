import { RetryLaterError } from '../../lib/index.js';

export type AuthorizationOutcome =
  | { kind: 'authorized'; authorizationId: string }
  | { kind: 'declined' }
  | { kind: 'failed'; pspStatus: number };

/** The PSP's `POST /v1/authorizations`, called with the key derived from ours. */
export class PspClient {
  constructor(
    private readonly baseUrl: string,
    private readonly timeoutMs: number,
  ) {}

  async authorize(
    charge: { amount: number; currency: string; customer: string },
    idempotencyKey: string,
  ): Promise<AuthorizationOutcome> {
    let response: Response;
    let body: { id?: unknown };
    try {
      response = await fetch(`${this.baseUrl}/v1/authorizations`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
        body: JSON.stringify(charge),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      body = (await response.json().catch(() => ({}))) as { id?: unknown };
    } catch {
      // Unreachable or too slow: nothing is final. The client retries with the same key and
      // resumes here; the PSP recognizes the derived key if this call did reach it.
      throw new RetryLaterError('The PSP is unreachable or did not answer in time.', 1, {
        error: 'psp_unreachable',
      });
    }
    if (response.status === 201 && typeof body.id === 'string') {
      return { kind: 'authorized', authorizationId: body.id };
    }
    if (response.status === 402) return { kind: 'declined' };
    return { kind: 'failed', pspStatus: response.status };
  }
}

/** Injection token of the PSP client. */
export const PSP_CLIENT = Symbol('PspClient');
