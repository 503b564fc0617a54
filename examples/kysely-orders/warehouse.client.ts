import { RetryLaterError } from '../../lib/index.js';

export const WAREHOUSE = Symbol('WAREHOUSE');

export interface Shipment {
  trackingNumber: string;
}

/**
 * The warehouse: an HTTP service that ships an order and answers its tracking number. It
 * honours `Idempotency-Key`, so a call repeated with the same key ships once.
 */
export class WarehouseClient {
  constructor(private readonly baseUrl: string) {}

  async ship(order: { id: string; sku: string; quantity: number }, idempotencyKey: string) {
    const response = await fetch(new URL('/shipments', this.baseUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: JSON.stringify({ orderId: order.id, sku: order.sku, quantity: order.quantity }),
      signal: AbortSignal.timeout(10_000),
    });
    if (!response.ok) {
      // Nothing is recorded: the retry calls again with the same derived key.
      throw new RetryLaterError(`the warehouse answered ${response.status}`);
    }
    return (await response.json()) as Shipment;
  }
}
