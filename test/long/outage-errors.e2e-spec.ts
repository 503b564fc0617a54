import { Client } from 'pg';
import { classifyHandlerError } from '../../lib/transaction/failure.js';
import { createTestDatabase, adminUrl, type TestDatabase } from '../support/database.js';
import { FAULTS, strike } from '../support/outage-faults.js';
import { LAYERS, probeOf } from '../support/outage-probes.js';
import { TcpProxy } from '../support/tcp-proxy.js';

/**
 * The outage table: what each data layer the library joins raises when the database fails
 * under it (real faults: backends terminated, sockets cut, a connect that hangs, a refused or
 * shutting-down server, a pool ended while the app stops), and how the library classifies
 * each. Every one must be "the database is unavailable" (a 503 with Retry-After, nothing
 * stored), never the handler's final answer (a stored 500).
 */
describe('what each data layer raises in an outage', () => {
  let database: TestDatabase;
  let proxy: TcpProxy;
  const rows: string[] = [];

  beforeAll(async () => {
    database = await createTestDatabase('outage_errors');
    const db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query('CREATE TABLE outage_probe (n int NOT NULL)');
    await db.end();
    const target = new URL(database.url);
    proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
    await proxy.start();
  });

  afterAll(async () => {
    console.log(rows.join('\n'));
    await proxy.stop();
    await database.drop();
  });

  describe.each(LAYERS)('%s', (layer) => {
    it.each(FAULTS)('%s', async (fault) => {
      const error = await strike(fault, proxy, adminUrl(), database.name, () =>
        probeOf(layer, proxy, database.url),
      );
      const failure = classifyHandlerError(error);
      rows.push(
        `| ${layer} | ${fault} | ${describeError(error)} | ${failure.kind === 'retry' ? failure.error.code : failure.kind} |`,
      );
      expect(error).toBeDefined();
      expect(failure.kind).toBe('retry');
    });
  });
});

function describeError(error: unknown): string {
  if (!(error instanceof Object)) return String(error);
  const { name, code, message, cause } = error as {
    name?: string;
    code?: unknown;
    message?: string;
    cause?: unknown;
  };
  const own = `${name}${typeof code === 'string' ? ` ${code}` : ''}: ${String(message).split('\n')[0].slice(0, 80)}`;
  return cause instanceof Object ? `${own} <- ${describeError(cause)}` : own;
}
