import { connect, createServer, type Server, type Socket } from 'node:net';

/** One connection through the proxy: the app's side and PostgreSQL's side. */
interface Pair {
  app: Socket;
  database: Socket;
}

/**
 * A TCP proxy in front of PostgreSQL that acts on one connection at a time, the one a test
 * found in `pg_stat_activity` by its `client_port` (the proxy's own port towards PostgreSQL):
 * the rest of the pool goes on working, as when one connection's path stalls or breaks.
 */
export class StallingProxy {
  private server?: Server;
  private readonly pairs = new Set<Pair>();
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<void> {
    this.server = createServer((app) => {
      const database = connect(this.targetPort, this.targetHost);
      const pair = { app, database };
      this.pairs.add(pair);
      app.pipe(database).pipe(app);
      const drop = () => {
        app.destroy();
        database.destroy();
        this.pairs.delete(pair);
      };
      app.on('error', drop).on('close', drop);
      database.on('error', drop).on('close', drop);
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  /**
   * Stops forwarding on the connection PostgreSQL sees from `clientPort`: `requests` keeps
   * what the app sends from reaching PostgreSQL; `replies` lets it through and keeps
   * PostgreSQL's answers from the app (the statement runs; its answer is lost).
   */
  stall(clientPort: number, direction: 'requests' | 'replies'): void {
    const { app, database } = this.pair(clientPort);
    const [from, to] = direction === 'requests' ? [app, database] : [database, app];
    from.unpipe(to);
    from.pause();
  }

  /**
   * Closes both sides of that connection, as a stalled path ends at last: PostgreSQL then
   * rolls back whatever of its transaction had not committed.
   */
  cut(clientPort: number): void {
    for (const { app, database } of this.pairs) {
      if (database.localPort !== clientPort) continue;
      app.destroy();
      database.destroy();
    }
  }

  /** Resets the app's side of that connection (a TCP RST): the app reads ECONNRESET. */
  reset(clientPort: number): void {
    this.pair(clientPort).app.resetAndDestroy();
  }

  async stop(): Promise<void> {
    for (const { app, database } of this.pairs) {
      app.destroy();
      database.destroy();
    }
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }

  /** Whether a connection through the proxy comes to PostgreSQL from `clientPort`. */
  carries(clientPort: number): boolean {
    for (const pair of this.pairs) if (pair.database.localPort === clientPort) return true;
    return false;
  }

  private pair(clientPort: number): Pair {
    for (const pair of this.pairs) if (pair.database.localPort === clientPort) return pair;
    throw new Error(`no connection through the proxy from port ${clientPort}`);
  }
}
