import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo } from 'node:net';

/** One call the warehouse received. */
export interface ShipmentCall {
  /** The `Idempotency-Key` it carried. */
  key: string;
  /** The body's `orderId`, as text (the examples send a number or a string); else undefined. */
  orderId: string | undefined;
}

/**
 * The warehouse the orders examples call when they ship, as a real HTTP server: `POST
 * /shipments` with an `Idempotency-Key` ships once per key (a call again with a key it saw
 * answers the same tracking number), and records every call. `hold()` holds its answers, once
 * it has shipped, until `release()`: a window in which a test kills the app while its call is
 * in flight. A call without a key is a 400, anything but `POST /shipments` a 404.
 */
export interface Warehouse {
  url: string;
  /** Every call, in order. */
  readonly calls: ShipmentCall[];
  /** The tracking number given for each key. */
  readonly shipments: Map<string, string>;
  /** Holds every answer from now until `release()`. */
  hold(): void;
  /** Sends the held answers, and holds no more. */
  release(): void;
  /** Resolves once the warehouse has received `count` calls in all. */
  received(count: number, withinMs?: number): Promise<void>;
  /** Releases what it holds, and stops. */
  close(): Promise<void>;
}

export async function startWarehouse(): Promise<Warehouse> {
  const calls: ShipmentCall[] = [];
  const shipments = new Map<string, string>();
  let holding = false;
  const waiting: (() => void)[] = [];
  const release = () => {
    holding = false;
    for (const send of waiting.splice(0)) send();
  };

  const answer = (req: IncomingMessage, res: ServerResponse, body: string) => {
    const key = req.headers['idempotency-key'];
    if (typeof key !== 'string') return void res.writeHead(400).end();
    const { orderId } = JSON.parse(body) as { orderId?: unknown };
    calls.push({ key, orderId: orderId === undefined ? undefined : String(orderId) });
    // Shipped on arrival: a caller that dies before the answer finds it under the same key.
    if (!shipments.has(key)) shipments.set(key, `TRK-${shipments.size + 1}`);
    const send = () => {
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ trackingNumber: shipments.get(key) }));
    };
    if (holding) waiting.push(send);
    else send();
  };

  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/shipments') return void res.writeHead(404).end();
      answer(req, res, body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls,
    shipments,
    hold: () => {
      holding = true;
    },
    release,
    received: async (count, withinMs = 10_000) => {
      const deadline = Date.now() + withinMs;
      while (calls.length < count) {
        if (Date.now() > deadline) throw new Error(`the warehouse got ${calls.length} calls`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
    close: () => {
      release();
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
