import { RetryLaterError } from '../../../lib/index.js';

/** A shipment as the warehouse answers it. */
export interface Shipment {
  trackingNumber: string;
}

/**
 * The warehouse's `POST /shipments`, called with the key derived from the request's, so that a
 * resumed request that calls it again gets the same shipment rather than a second one.
 */
export class WarehouseClient {
  constructor(private readonly baseUrl: string) {}

  async ship(
    order: { id: number; sku: string; quantity: number },
    idempotencyKey: string,
  ): Promise<Shipment> {
    let res: Response;
    try {
      res = await fetch(new URL('/shipments', this.baseUrl), {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
        body: JSON.stringify(order),
        signal: AbortSignal.timeout(10_000),
      });
    } catch {
      // Unreachable or too slow: the client retries with its key and this call is made again
      // with the same derived key, which the warehouse recognizes if it did arrive.
      throw new RetryLaterError('The warehouse is unreachable or did not answer in time.', 1);
    }
    const body = (await res.json().catch(() => ({}))) as { trackingNumber?: unknown };
    if (res.status !== 201 || typeof body.trackingNumber !== 'string') {
      throw new RetryLaterError(`The warehouse answered ${res.status}.`, 1);
    }
    return { trackingNumber: body.trackingNumber };
  }
}

export const WAREHOUSE = 'WAREHOUSE';
