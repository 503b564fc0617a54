import { Client, Pool } from 'pg';
import { TcpProxy } from './tcp-proxy.js';

/**
 * Real faults of a database under a data layer, for the outage table
 * (test/long/outage-errors.e2e-spec.ts): each runs the data layer's own calls against a PostgreSQL
 * reached through a `TcpProxy`, breaks the database the way an outage does, and returns what
 * the data layer threw (or `undefined` when the call went through).
 */

/** One data layer's calls, as the table drives them. */
export interface DataLayerProbe {
  /** Runs one statement outside a transaction. */
  statement(): Promise<unknown>;
  /**
   * Opens a transaction, runs `first`, waits for `between`, then runs a second statement and
   * commits: the fault is set off in `between`.
   */
  transaction(between: () => Promise<void>): Promise<unknown>;
  /** Runs `SELECT pg_sleep(seconds)` (the fault strikes while it runs). */
  sleep(seconds: number): Promise<unknown>;
  /** Ends the data layer (and its pool). */
  end(): Promise<void>;
  /** Resolves once the data layer is set up, as an app's is before it serves (TypeORM's). */
  ready?(): Promise<void>;
}

/** The faults, each set off by `strike` on a connection the probe holds or will open. */
export type FaultName =
  | 'backend terminated between statements'
  | 'backend terminated mid-statement'
  | 'socket cut mid-transaction'
  | 'connect timed out'
  | 'connection refused'
  | 'database shutting down'
  | 'pool ended';

export const FAULTS: FaultName[] = [
  'backend terminated between statements',
  'backend terminated mid-statement',
  'socket cut mid-transaction',
  'connect timed out',
  'connection refused',
  'database shutting down',
  'pool ended',
];

/** What a fault left: the error the data layer threw. */
export async function strike(
  fault: FaultName,
  proxy: TcpProxy,
  adminUrl: string,
  databaseName: string,
  probe: () => DataLayerProbe,
): Promise<unknown> {
  const terminateAll = () => terminateBackends(adminUrl, databaseName);
  const layer = probe();
  await layer.ready?.();
  try {
    switch (fault) {
      case 'backend terminated between statements':
        return await caught(layer.transaction(terminateAll));
      case 'backend terminated mid-statement': {
        // Long enough that the terminate always comes first, however slow the machine; it ends it.
        const sleeping = caught(layer.sleep(30));
        await waitFor(async () => (await sleepers(adminUrl, databaseName)) > 0);
        await terminateAll();
        return await sleeping;
      }
      case 'socket cut mid-transaction':
        return await caught(layer.transaction(() => proxy.restore()));
      case 'connect timed out':
        proxy.blackhole();
        try {
          return await caught(layer.statement());
        } finally {
          await proxy.restore();
        }
      case 'connection refused':
        await proxy.refuse();
        try {
          return await caught(layer.statement());
        } finally {
          await proxy.restore();
        }
      case 'database shutting down': {
        // What a server in `pg_ctl stop -m fast` answers new sessions: refused at start-up.
        await proxy.refuse();
        const shuttingDown = new ShuttingDownServer();
        await shuttingDown.listen(proxy.port);
        try {
          return await caught(layer.statement());
        } finally {
          await shuttingDown.close();
          await proxy.restore();
        }
      }
      case 'pool ended': {
        // The pool in use first (not the fault: on a loaded machine the first connect through
        // the proxy, just restored by the fault before, may time out once).
        await waitFor(() =>
          layer.statement().then(
            () => true,
            () => false,
          ),
        );
        await layer.end();
        return await caught(layer.statement());
      }
    }
  } finally {
    await layer.end().catch(() => undefined);
  }
}

/** Terminates every session on `databaseName` but the one asking (as an administrator would). */
export async function terminateBackends(adminUrl: string, databaseName: string): Promise<void> {
  const admin = new Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
       WHERE datname = $1 AND pid <> pg_backend_pid()`,
      [databaseName],
    );
  } finally {
    await admin.end();
  }
}

/**
 * The faults that strike a handler held mid-work (the end-to-end cells of
 * test/long/outage-requests.e2e-spec.ts and test/outage-messages.e2e-spec.ts): its connection is
 * gone under its open transaction, by the server's hand or the network's.
 */
export const MID_WORK_FAULTS = {
  'its backends are terminated': (database: { url: string; name: string }) =>
    terminateBackends(database.url, database.name),
  'its sockets are cut': (_database: { url: string; name: string }, proxy: TcpProxy) =>
    proxy.restore(),
};

export type MidWorkFault = keyof typeof MID_WORK_FAULTS;

async function caught(call: Promise<unknown>): Promise<unknown> {
  try {
    await call;
    return undefined;
  } catch (error) {
    return error;
  }
}

async function sleepers(adminUrl: string, databaseName: string): Promise<number> {
  const admin = new Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
       WHERE datname = $1 AND query LIKE '%pg_sleep%' AND state = 'active' AND pid <> pg_backend_pid()`,
      [databaseName],
    );
    return rows[0].n;
  } finally {
    await admin.end();
  }
}

async function waitFor(check: () => Promise<boolean>, timeoutMs = 25_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error('the fault could not be set up in time');
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/**
 * A server on the database's port that answers every start-up with PostgreSQL's own FATAL
 * `57P03` ("the database system is shutting down"), as a server being stopped does.
 */
class ShuttingDownServer {
  private server?: import('node:net').Server;

  async listen(port: number): Promise<void> {
    const { createServer } = await import('node:net');
    this.server = createServer((socket) => {
      socket.once('data', () => {
        const fields = [
          'SFATAL',
          'VFATAL',
          'C57P03',
          'Mthe database system is shutting down',
          '',
        ].join('\0');
        const body = Buffer.from(`${fields}\0`, 'utf8');
        const header = Buffer.alloc(5);
        header.write('E', 0);
        header.writeInt32BE(body.length + 4, 1);
        socket.end(Buffer.concat([header, body]));
      });
      socket.on('error', () => undefined);
    });
    await new Promise<void>((resolve) => this.server!.listen(port, '127.0.0.1', resolve));
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }
}

/**
 * A pg.Pool through the proxy, with a short connect timeout (the fault 'connect timed out'):
 * 1.5 s, not less, as an ordinary connect on this 2-core machine under a full suite's load
 * took more than 500 ms once and failed 'backend terminated between statements' with the
 * timeout's error in place of the termination's.
 */
export function proxiedPool(proxy: TcpProxy, databaseUrl: string): Pool {
  const url = new URL(databaseUrl);
  url.host = `127.0.0.1:${proxy.port}`;
  const pool = new Pool({
    connectionString: url.toString(),
    connectionTimeoutMillis: 1500,
    max: 4,
  });
  // An idle connection killed by the fault: the pool emits it; the table reads the calls'.
  pool.on('error', () => undefined);
  return pool;
}
