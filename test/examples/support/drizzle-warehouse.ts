import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { type AddressInfo } from 'node:net';

/**
 * A fake warehouse as a real HTTP server: `POST /shipments` with an `Idempotency-Key` ships
 * once per key (the same tracking number for every call with it), and counts every call.
 */
export interface Warehouse {
  url: string;
  /** The calls, in order: the key each one carried and the order it was for. */
  calls: { key: string; orderId: number }[];
  /** The tracking number given for each key. */
  shipments: Map<string, string>;
  close(): Promise<void>;
}

export async function startWarehouse(): Promise<Warehouse> {
  const calls: Warehouse['calls'] = [];
  const shipments = new Map<string, string>();
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      const key = req.headers['idempotency-key'];
      if (req.method !== 'POST' || req.url !== '/shipments' || typeof key !== 'string') {
        res.writeHead(400).end();
        return;
      }
      const { orderId } = JSON.parse(body) as { orderId: number };
      calls.push({ key, orderId });
      if (!shipments.has(key)) shipments.set(key, `TRK-${randomUUID().slice(0, 8)}`);
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ trackingNumber: shipments.get(key) }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls,
    shipments,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
