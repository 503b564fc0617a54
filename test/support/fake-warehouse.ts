import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo } from 'node:net';

/** One call the warehouse received. */
export interface ShipmentCall {
  idempotencyKey: string | undefined;
  orderId: string;
}

/**
 * The examples' warehouse, a real HTTP server: `POST /shipments` answers a tracking number,
 * the same one for every call with the same `Idempotency-Key` (it ships once per key).
 * `holdNext()` holds the next call until `release()`: a window in which a test kills the
 * caller while its call is in flight.
 */
export interface FakeWarehouse {
  url: string;
  calls: ShipmentCall[];
  /** Tracking numbers handed out, one per distinct key. */
  shipments: Map<string, string>;
  holdNext(): void;
  /** Resolves once a held call has arrived. */
  held(): Promise<void>;
  release(): void;
  close(): Promise<void>;
}

export async function startFakeWarehouse(): Promise<FakeWarehouse> {
  const calls: ShipmentCall[] = [];
  const shipments = new Map<string, string>();
  let holding = false;
  let heldResponses: (() => void)[] = [];
  let arrived: (() => void) | undefined;
  let arrival = new Promise<void>((resolve) => (arrived = resolve));

  const answer = (req: IncomingMessage, res: ServerResponse, body: string) => {
    const key = req.headers['idempotency-key'] as string | undefined;
    const { orderId } = JSON.parse(body) as { orderId: string };
    calls.push({ idempotencyKey: key, orderId });
    // Shipped on arrival; a caller that dies before the answer finds it under the same key.
    const ref = key ?? `no-key-${calls.length}`;
    if (!shipments.has(ref)) shipments.set(ref, `TRK-${orderId}-${shipments.size + 1}`);
    const send = () => {
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ trackingNumber: shipments.get(ref) }));
    };
    if (!holding) return send();
    holding = false;
    heldResponses.push(send);
    arrived?.();
  };

  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/shipments') {
        res.writeHead(404).end();
        return;
      }
      answer(req, res, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    shipments,
    holdNext: () => {
      holding = true;
      arrival = new Promise<void>((resolve) => (arrived = resolve));
    },
    held: () => arrival,
    release: () => {
      const waiting = heldResponses;
      heldResponses = [];
      for (const send of waiting) send();
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
