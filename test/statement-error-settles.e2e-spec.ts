import { connect, createServer, type Server, type Socket } from 'node:net';
import pg from 'pg';
import { queryWithDeadline } from '../lib/connection/deadline.js';
import { adminUrl } from './support/database.js';

/**
 * A library statement's error reaches its caller once the session is past it. PostgreSQL
 * sends the error (`E`) before it aborts the statement's transaction and says it is ready for
 * the next (`Z`): until then the locks the statement took are held. Seen in CI: a batch of
 * claims failed on one claim's row, was sent again claim by claim at once, and one of those
 * claims met its key's advisory lock still held by the aborting batch, so it was answered
 * "held" (a 409) for a key nobody held, and no row was made.
 *
 * The window is microseconds on a quiet server; a proxy widens it by holding back the `Z`
 * that follows an `E`, and the test asks whether the caller heard of the error before it.
 */
class ReadyLateProxy {
  private server?: Server;
  private readonly sockets = new Set<Socket>();
  port = 0;
  /** When the proxy passed on a `Z` it had held back after an `E`. */
  readyPassedAt: number[] = [];

  constructor(
    private readonly target: URL,
    private readonly holdMs: number,
  ) {}

  async start(): Promise<void> {
    this.server = createServer((client) => {
      const upstream = connect(Number(this.target.port || 5432), this.target.hostname);
      this.sockets.add(client).add(upstream);
      client.pipe(upstream);
      let pending = Buffer.alloc(0);
      let afterError = false;
      // Server to client: whole messages (a type byte, then a length that counts itself).
      let queue = Promise.resolve();
      upstream.on('data', (chunk: Buffer) => {
        pending = Buffer.concat([pending, chunk]);
        while (pending.length >= 5) {
          const length = pending.readUInt32BE(1) + 1;
          if (pending.length < length) break;
          const message = pending.subarray(0, length);
          pending = pending.subarray(length);
          const type = String.fromCharCode(message[0]);
          const held = type === 'Z' && afterError;
          if (type === 'E') afterError = true;
          if (type === 'Z') afterError = false;
          queue = queue.then(async () => {
            if (held) {
              await new Promise((resolve) => setTimeout(resolve, this.holdMs));
              this.readyPassedAt.push(performance.now());
            }
            if (client.writable) client.write(message);
          });
        }
      });
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on('error', close).on('close', close);
      upstream.on('error', close).on('close', close);
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    const address = this.server.address();
    this.port = typeof address === 'object' && address ? address.port : 0;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }
}

describe('a statement’s error, as the library hears it', () => {
  const target = new URL(adminUrl());
  const proxy = new ReadyLateProxy(target, 300);
  let client: pg.Client;

  beforeAll(async () => {
    await proxy.start();
    const url = new URL(target);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    client = new pg.Client({ connectionString: url.toString() });
    await client.connect();
  });
  afterAll(async () => {
    await client?.end();
    await proxy.stop();
  });

  it('comes once the session is past the failed statement (its transaction aborted)', async () => {
    const heard = await queryWithDeadline(
      client as unknown as pg.PoolClient,
      { text: 'SELECT pg_advisory_xact_lock(4242), 1/0' },
      5_000,
    ).then(
      () => undefined,
      (error: unknown) => ({ error, at: performance.now() }),
    );
    expect((heard?.error as { code?: string }).code).toBe('22012');
    expect(proxy.readyPassedAt).toHaveLength(1);
    expect(heard!.at).toBeGreaterThanOrEqual(proxy.readyPassedAt[0]);
    // And the session is usable at once: nothing of the failed statement is left on it.
    const { rows } = await client.query('SELECT pg_try_advisory_xact_lock(4242) AS free');
    expect(rows[0]).toEqual({ free: true });
  });

  it('control: node-postgres alone hands the error on before the session is past it', async () => {
    await client.query('SELECT 1'); // nothing left held back
    proxy.readyPassedAt = [];
    const heardAt = await client.query('SELECT 1/0').then(
      () => undefined,
      () => performance.now(),
    );
    // The held-back `Z` is passed on later: the caller heard of the error first.
    await client.query('SELECT 1');
    expect(proxy.readyPassedAt).toHaveLength(1);
    expect(heardAt).toBeLessThan(proxy.readyPassedAt[0]);
  });
});
