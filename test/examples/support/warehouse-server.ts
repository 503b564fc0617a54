import { createServer, type IncomingMessage, type Server } from 'node:http';
import { type AddressInfo } from 'node:net';

/**
 * The warehouse the orders examples call when they ship: a real HTTP server that creates one
 * shipment per `Idempotency-Key` (a call again with a key it saw answers the same shipment),
 * and can hold its answers so that a test kills the app while a call is in flight.
 */
export class WarehouseServer {
  /** Every call, in order: the key each carried. */
  readonly calls: string[] = [];
  /** The shipment of each key. */
  readonly shipments = new Map<string, string>();
  private server?: Server;
  private held = false;
  private readonly waiting: (() => void)[] = [];
  url = '';

  async start(): Promise<void> {
    this.server = createServer((req, res) => void this.answer(req, res));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Holds every answer until `release()`. */
  hold(): void {
    this.held = true;
  }

  release(): void {
    this.held = false;
    for (const resume of this.waiting.splice(0)) resume();
  }

  /** Resolves once the warehouse has received `count` calls in all. */
  async received(count: number, withinMs = 10_000): Promise<void> {
    const deadline = Date.now() + withinMs;
    while (this.calls.length < count) {
      if (Date.now() > deadline) throw new Error(`the warehouse got ${this.calls.length} calls`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  async stop(): Promise<void> {
    this.release();
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }

  private async answer(req: IncomingMessage, res: import('node:http').ServerResponse) {
    for await (const _chunk of req) {
      // the order's JSON: the shipment depends on the key alone
    }
    const key = String(req.headers['idempotency-key'] ?? '');
    this.calls.push(key);
    if (!this.shipments.has(key)) this.shipments.set(key, `TRK-${this.shipments.size + 1}`);
    if (this.held) await new Promise<void>((resolve) => this.waiting.push(resolve));
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ trackingNumber: this.shipments.get(key) }));
  }
}
