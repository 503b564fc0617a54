import { RetryLaterError } from '../../lib/index.js';

export const WAREHOUSE_URL = Symbol('WAREHOUSE_URL');

export interface Shipment {
  trackingNumber: string;
}

/**
 * Asks the warehouse to ship an order. The call carries the phase's derived key, so that a
 * worker that takes a crashed request over and calls again gets the same shipment back.
 */
export async function requestShipment(
  warehouseUrl: string,
  orderId: number,
  idempotencyKey: string,
): Promise<Shipment> {
  let res: Response;
  try {
    res = await fetch(`${warehouseUrl}/shipments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: JSON.stringify({ orderId }),
      signal: AbortSignal.timeout(5000),
    });
  } catch {
    // Nothing is known to have shipped: a 503 the client retries, with the same derived key.
    throw new RetryLaterError('the warehouse is unreachable', 1);
  }
  if (!res.ok) throw new RetryLaterError(`the warehouse answered ${res.status}`, 1);
  return (await res.json()) as Shipment;
}
