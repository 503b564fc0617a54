import { Client } from 'pg';
import request from 'supertest';
import { DataSource, type DataSourceOptions } from 'typeorm';
import { postgresConnection } from '../../lib/index.js';
import { freePort } from '../../sample-app/database/embedded-postgres.js';
import { type FakePsp, startFakePsp } from '../../sample-app/psp/fake-psp.js';
import { adminUrl, createTestDatabase, type TestDatabase } from '../support/database.js';
import { startSampleApp, type WorkerProcess } from '../support/sample-app-process.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { startTlsPostgres, type TlsPostgres } from '../support/tls-postgres.js';

/** Fails with `what` once `ms` have passed, instead of letting a hang reach jest's timeout. */
async function within<T>(ms: number, what: string, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: still hanging at ${ms / 1000} s`)), ms);
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}

async function openDataSource(url: string, options: Partial<DataSourceOptions> = {}) {
  const dataSource = new DataSource({
    type: 'postgres',
    ...postgresConnection(url),
    ...options,
  } as DataSourceOptions);
  await dataSource.initialize();
  return dataSource;
}

/** Closes a DataSource once it opens; one still opening after 5 s is left to the process. */
async function closeQuietly(dataSource: Promise<DataSource>) {
  const closing = dataSource.then((opened) => opened.destroy());
  await within(5_000, 'closing', closing).catch(() => undefined);
}

/**
 * A first host that accepts TCP connections and never answers (a machine that hangs, a
 * black-holed route): the hosts after it must still serve, each attempt bounded by the
 * connect timeout, from the URL (`connect_timeout`, seconds) or from the pool.
 */
describe('a listed host that accepts and never answers', () => {
  let database: TestDatabase;
  let hung: TcpProxy;
  let real: URL;

  beforeAll(async () => {
    database = await createTestDatabase('connstr_hang');
    real = new URL(adminUrl());
    // Forwards nothing: connections are accepted, and then nothing is ever said.
    hung = new TcpProxy('127.0.0.1', 1);
    await hung.start();
    hung.blackhole();
  });
  afterAll(async () => {
    await hung?.stop();
    await database?.drop();
  });

  const urlOf = (query: string) =>
    `postgres://postgres@127.0.0.1:${hung.port},${real.hostname}:${real.port || 5432}/` +
    `${database.name}${query}`;

  it.each([
    ['connect_timeout=2 in the URL', '?connect_timeout=2', {}],
    ["the pool's connectTimeoutMS: 2000", '', { connectTimeoutMS: 2000 }],
  ])(
    'starts on the second host, with %s',
    async (_name, query, options) => {
      const opening = openDataSource(urlOf(query), options);
      try {
        const dataSource = await within(15_000, 'start-up', opening);
        const [row] = (await dataSource.query('SELECT current_database() AS name')) as {
          name: string;
        }[];
        expect(row.name).toBe(database.name);
      } finally {
        await closeQuietly(opening);
      }
    },
    30_000,
  );

  it('a running app whose first host starts hanging: new connections go to the second', async () => {
    // The first host forwards to the real server until it hangs.
    const flaky = new TcpProxy(real.hostname, Number(real.port || 5432));
    await flaky.start();
    const url =
      `postgres://postgres@127.0.0.1:${flaky.port},${real.hostname}:${real.port || 5432}/` +
      `${database.name}?application_name=hang_running`;
    const opening = openDataSource(url, { connectTimeoutMS: 2000, poolSize: 3 });
    // The server ends the pool's connections (as a failover does): the pool drops them.
    const endConnections = async (dataSource: DataSource) => {
      const admin = new Client({ connectionString: adminUrl() });
      await admin.connect();
      await admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`,
        ['hang_running'],
      );
      await admin.end();
      // Until the pool has seen every one end (each is an error event on an idle client).
      const pool = (dataSource.driver as unknown as { master: { totalCount: number } }).master;
      await within(
        10_000,
        'the pool dropping its ended connections',
        (async () => {
          while (pool.totalCount > 0) await new Promise((resolve) => setTimeout(resolve, 50));
        })(),
      );
    };
    const sixAtOnce = (dataSource: DataSource) =>
      Promise.all(
        Array.from({ length: 6 }, (_, i) =>
          dataSource
            .query('SELECT $1::int AS i, pg_sleep(0.1)', [i])
            .then((rows: { i: number }[]) => rows[0].i),
        ),
      );
    try {
      const dataSource = await within(15_000, 'start-up', opening);
      // Three connections in the pool, all through the first host.
      expect(await sixAtOnce(dataSource)).toEqual([0, 1, 2, 3, 4, 5]);
      // Their server ends them while the first host still forwards (so that the pool sees it),
      // and then the first host hangs: new connections are accepted and never answered.
      await endConnections(dataSource);
      flaky.blackhole();
      // A new connection waits out one timeout on the first host, then takes the second.
      const [row] = (await within(
        15_000,
        'the first query after the first host hung',
        dataSource.query('SELECT current_database() AS name'),
      )) as { name: string }[];
      expect(row.name).toBe(database.name);
      // The ones after go straight to the second, which answered last: six at once on three
      // new connections, none waiting out the first host (the pool gives a waiter 2 s).
      await endConnections(dataSource);
      expect(await within(15_000, 'six queries', sixAtOnce(dataSource))).toEqual([
        0, 1, 2, 3, 4, 5,
      ]);
    } finally {
      await closeQuietly(opening);
      await flaky.stop();
    }
  }, 60_000);

  describe.each(['express', 'fastify'] as const)('the sample app on %s', (adapter) => {
    let psp: FakePsp;
    let app: WorkerProcess | undefined;
    beforeAll(async () => {
      psp = await startFakePsp();
    });
    afterAll(async () => {
      await app?.kill();
      await psp?.close();
    });

    it('migrates under its lock and charges, on the second host', async () => {
      app = await startSampleApp({
        adapter,
        databaseUrl: urlOf('?target_session_attrs=read-write&connect_timeout=2'),
        pspUrl: psp.url,
      });
      const charge = { amount: 100, currency: 'eur', customer: `cus_hang_${adapter}` };
      const created = await request(app.url)
        .post('/charges')
        .set('X-Tenant-Id', '1')
        .set('Idempotency-Key', `hang-${adapter}`)
        .send(charge);
      expect(created.status).toBe(201);
      const admin = new Client({ connectionString: database.url });
      await admin.connect();
      const { rows } = await admin.query('SELECT id FROM charges WHERE customer = $1', [
        charge.customer,
      ]);
      await admin.end();
      expect(rows).toEqual([{ id: created.body.id }]);
    }, 60_000);
  });
});

/**
 * The parameters of a connection string hold for every host it lists, as node-postgres reads
 * them for one: TLS (`sslmode`, `sslrootcert`), `application_name`, `options`, and passwords
 * with reserved characters. Checked on a PostgreSQL of the test's own with `ssl = on`.
 */
describe('the parameters of a connection string, for one host and for several', () => {
  let tls: TlsPostgres;
  let dead: number;

  beforeAll(async () => {
    tls = await startTlsPostgres();
    dead = await freePort();
  }, 60_000);
  afterAll(async () => {
    await tls?.stop();
  });

  const hostsOf = (count: 'one host' | 'two hosts') =>
    count === 'one host' ? `127.0.0.1:${tls.port}` : `127.0.0.1:${dead},127.0.0.1:${tls.port}`;

  type Session = { ssl: boolean; application_name: string; statement_timeout: string };
  const session = async (url: string): Promise<Session> => {
    const opening = openDataSource(url);
    try {
      const dataSource = await within(20_000, 'connect', opening);
      const [row] = (await dataSource.query(
        `SELECT s.ssl, current_setting('application_name') AS application_name,
                current_setting('statement_timeout') AS statement_timeout
         FROM pg_stat_ssl s WHERE s.pid = pg_backend_pid()`,
      )) as Session[];
      return row;
    } finally {
      await closeQuietly(opening);
    }
  };

  describe.each(['one host', 'two hosts'] as const)('%s', (count) => {
    it('sslmode=require (libpq semantics) is TLS, with the application_name given', async () => {
      const url = `postgres://postgres@${hostsOf(count)}/postgres?sslmode=require&uselibpqcompat=true&application_name=conn_str_e2e`;
      expect(await session(url)).toMatchObject({ ssl: true, application_name: 'conn_str_e2e' });
    });

    it('sslmode=disable is clear text', async () => {
      const url = `postgres://postgres@${hostsOf(count)}/postgres?sslmode=disable`;
      expect(await session(url)).toMatchObject({ ssl: false });
    });

    it('sslmode=verify-full with the CA that signed the server is TLS', async () => {
      const url = `postgres://postgres@${hostsOf(count)}/postgres?sslmode=verify-full&sslrootcert=${tls.caFile}`;
      expect(await session(url)).toMatchObject({ ssl: true });
    });

    it('sslmode=verify-full with another CA is refused', async () => {
      const url = `postgres://postgres@${hostsOf(count)}/postgres?sslmode=verify-full&sslrootcert=${tls.wrongCaFile}`;
      await expect(session(url)).rejects.toThrow(/unable to verify the first certificate/);
    });

    it('options sets the session parameters', async () => {
      const url = `postgres://postgres@${hostsOf(count)}/postgres?options=${encodeURIComponent('-c statement_timeout=4321')}`;
      expect(await session(url)).toMatchObject({ statement_timeout: '4321ms' });
    });

    it.each([
      ['escaped throughout', (password: string) => encodeURIComponent(password)],
      [
        'with its ":" and "@" as they are (node-postgres reads up to the last "@")',
        (password: string) =>
          encodeURIComponent(password).replace(/%3A/g, ':').replace(/%40/g, '@'),
      ],
    ])('a password with @ : / %% # in it, %s, logs in over TLS', async (_name, write) => {
      const { name, password } = tls.passwordUser;
      const url = `postgres://${name}:${write(password)}@${hostsOf(count)}/postgres?sslmode=require&uselibpqcompat=true`;
      expect(await session(url)).toMatchObject({ ssl: true });
    });

    it('a wrong password is refused', async () => {
      const { name } = tls.passwordUser;
      const url = `postgres://${name}:wrong@${hostsOf(count)}/postgres?sslmode=require&uselibpqcompat=true`;
      await expect(session(url)).rejects.toThrow(
        /password authentication failed for user "pw_user"/,
      );
    });
  });
});
