import { type Order } from '../generated/client.js';

/** An order as the API answers it (ids as numbers: JSON has no bigint). */
export interface OrderView {
  id: number;
  sku: string;
  quantity: number;
  status: string;
  trackingNumber?: string;
}

export function orderView(order: Order): OrderView {
  return {
    id: Number(order.id),
    sku: order.sku,
    quantity: order.quantity,
    status: order.status,
    ...(order.trackingNumber === null ? {} : { trackingNumber: order.trackingNumber }),
  };
}
