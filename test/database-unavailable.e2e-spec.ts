import { type INestApplication } from '@nestjs/common';
import { Client } from 'pg';
import request from 'supertest';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { TcpProxy } from './support/tcp-proxy.js';
import { ADAPTERS, createTestApp, SIDE_EFFECTS_DDL } from './support/test-app.js';

/** The app reaches PostgreSQL through a proxy the test cuts, as a network or a failover would. */
describe.each(ADAPTERS)('an unreachable database on %s', (adapter) => {
  let database: TestDatabase;
  let db: Client;
  let proxy: TcpProxy;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase(`unavailable_${adapter}`);
    db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(SIDE_EFFECTS_DDL);
    const target = new URL(database.url);
    proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
    await proxy.start();
    const viaProxy = new URL(database.url);
    viaProxy.hostname = '127.0.0.1';
    viaProxy.port = String(proxy.port);
    app = await createTestApp({
      databaseUrl: viaProxy.toString(),
      adapter,
      connectTimeoutMS: 1000,
      idempotency: { databaseTimeoutMs: 1500 },
    });
  });
  afterAll(async () => {
    await app?.close();
    await proxy?.stop();
    await db?.end();
    await database?.drop();
  });

  const order = (key: string) =>
    request(app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', key)
      .set('X-Tenant-Id', '1')
      .send({ amount: 12 });
  const executions = async () =>
    Number((await db.query<{ n: string }>('SELECT count(*) AS n FROM side_effects')).rows[0].n);

  it.each([
    ['refuses connections', (p: TcpProxy) => p.refuse()],
    ['stops answering', (p: TcpProxy) => p.blackhole()],
  ])(
    'answers 503 when the database %s, runs nothing, and the key works once it is back',
    async (_name, cut) => {
      const key = `outage-${adapter}-${_name.replace(/ /g, '-')}`;
      expect((await order('warm-up-' + key)).status).toBe(201);
      const before = await executions();

      await cut(proxy);
      const down = await order(key);
      expect(down.status).toBe(503);
      expect(down.headers['content-type']).toMatch('application/problem+json');
      expect(down.headers['retry-after']).toBe('1');
      expect(down.body.code).toBe('store_unavailable');
      expect(await executions()).toBe(before);

      await proxy.restore();
      const back = await order(key);
      expect(back.status).toBe(201);
      expect(await executions()).toBe(before + 1);
      const replay = await order(key);
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(await executions()).toBe(before + 1);
    },
  );
});
