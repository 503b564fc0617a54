import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { postgresConnection } from '../lib/index.js';
import { freePort, startEmbeddedPostgres } from '../sample-app/database/embedded-postgres.js';
import { type FakePsp, startFakePsp } from '../sample-app/psp/fake-psp.js';
import { adminUrl, createTestDatabase, type TestDatabase } from './support/database.js';
import { startSampleApp, type WorkerProcess } from './support/sample-app-process.js';

/**
 * A connection string that lists several hosts, as libpq allows and the sample app's
 * contract says: a host that is down, a host whose sessions are read-only (a standby, as a
 * PostgreSQL of the test's own with `default_transaction_read_only`), and the writable one.
 */
describe('several hosts, the writable one followed', () => {
  let database: TestDatabase;
  let readOnly: Awaited<ReturnType<typeof startEmbeddedPostgres>>;
  let url: string;
  let bareUrl: string;
  let realPort: number;
  let readOnlyPort: number;

  beforeAll(async () => {
    database = await createTestDatabase('writable');
    readOnly = await startEmbeddedPostgres();
    readOnlyPort = Number(new URL(readOnly.url).port);
    const admin = new Client({ connectionString: readOnly.url });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${database.name}`);
    await admin.query(`ALTER DATABASE ${database.name} SET default_transaction_read_only = on`);
    await admin.end();
    const real = new URL(adminUrl());
    realPort = Number(real.port || 5432);
    const dead = await freePort();
    const hosts = `127.0.0.1:${dead},127.0.0.1:${readOnlyPort},${real.hostname}:${realPort}`;
    bareUrl = `postgres://postgres:postgres@${hosts}/${database.name}`;
    url = `${bareUrl}?target_session_attrs=read-write`;
  }, 120_000);
  afterAll(async () => {
    await readOnly?.stop();
    await database?.drop();
  });

  const connect = async (connectionString: string) => {
    const dataSource = new DataSource({
      type: 'postgres',
      ...postgresConnection(connectionString),
    });
    await dataSource.initialize();
    return dataSource;
  };

  it('with target_session_attrs=read-write, works against the host that accepts writes', async () => {
    const dataSource = await connect(url);
    try {
      const [row] = (await dataSource.query(
        'SELECT inet_server_port() AS port, current_setting($1) AS read_only',
        ['transaction_read_only'],
      )) as { port: number; read_only: string }[];
      expect(row).toEqual({ port: realPort, read_only: 'off' });
      await dataSource.query('CREATE TABLE written (id int)');
    } finally {
      await dataSource.destroy();
    }
  });

  it('without it, works against the first host that answers', async () => {
    const dataSource = await connect(bareUrl);
    try {
      const [row] = (await dataSource.query('SELECT inet_server_port() AS port')) as {
        port: number;
      }[];
      expect(row.port).toBe(readOnlyPort);
    } finally {
      await dataSource.destroy();
    }
  });

  describe('the sample app given such a DATABASE_URL', () => {
    let psp: FakePsp;
    let app: WorkerProcess;
    beforeAll(async () => {
      psp = await startFakePsp();
      app = await startSampleApp({ adapter: 'express', databaseUrl: url, pspUrl: psp.url });
    }, 60_000);
    afterAll(async () => {
      await app?.kill();
      await psp?.close();
    });

    it('migrates and charges on the writable host', async () => {
      const charge = { amount: 100, currency: 'eur', customer: 'cus_multi' };
      const created = await request(app.url)
        .post('/charges')
        .set('X-Tenant-Id', '1')
        .set('Idempotency-Key', 'multi-1')
        .send(charge);
      expect(created.status).toBe(201);
      const db = new Client({
        connectionString: (() => {
          const real = new URL(adminUrl());
          real.pathname = `/${database.name}`;
          return real.toString();
        })(),
      });
      await db.connect();
      const { rows } = await db.query('SELECT id FROM charges WHERE customer = $1', ['cus_multi']);
      await db.end();
      expect(rows).toEqual([{ id: created.body.id }]);
    });
  });
});
