import { readFileSync } from 'node:fs';
import { type INestApplication } from '@nestjs/common';
import { Client } from 'pg';
import request from 'supertest';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import {
  createOutageApp,
  openGate,
  OUTAGE_DDL,
  type OutageLayer,
  reachedGate,
} from './support/outage-app.js';
import { TcpProxy } from './support/tcp-proxy.js';

/**
 * The database fails while a handler's work is under way, on every data layer the library
 * joins and every path (a request, a phase, a consumer's delivery): the answer is a 503 with
 * Retry-After, nothing of the work is kept, nothing is stored, and the retry runs it once.
 */
const FAULTS = {
  'its backends are terminated': async (database: TestDatabase) => {
    const admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
       WHERE datname = $1 AND pid <> pg_backend_pid()`,
      [database.name],
    );
    await admin.end();
  },
  'its sockets are cut': async (_database: TestDatabase, proxy: TcpProxy) => proxy.restore(),
};

const PATHS = ['requests', 'phases', 'messages', 'graphql'] as const;

describe.each([
  ['TypeORM', true, ['typeorm']],
  ['a pg.Pool', false, ['pg', 'prisma', 'drizzle', 'kysely']],
] as const)('the database failing mid-work, on %s', (_name, typeorm, layers) => {
  let database: TestDatabase;
  let proxy: TcpProxy;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase(`outage_${typeorm ? 'typeorm' : 'pool'}`);
    const db = new Client({ connectionString: database.url });
    await db.connect();
    if (!typeorm) await db.query(readFileSync('migrations/schema.sql', 'utf8'));
    await db.query(OUTAGE_DDL);
    await db.end();
    const target = new URL(database.url);
    proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
    await proxy.start();
    const viaProxy = new URL(database.url);
    viaProxy.host = `127.0.0.1:${proxy.port}`;
    app = await createOutageApp(viaProxy.toString(), typeorm);
  });

  afterAll(async () => {
    await app?.close();
    await proxy?.stop();
    await database?.drop();
  });

  /** Read on a connection of its own: the faults terminate every other one. */
  const rows = async (tag: string) => {
    const reader = new Client({ connectionString: database.url });
    await reader.connect();
    try {
      const result = await reader.query<{ n: number }>(
        'SELECT n FROM outage_rows WHERE tag = $1 ORDER BY n',
        [tag],
      );
      return result.rows.map((row) => row.n);
    } finally {
      await reader.end();
    }
  };

  const cells = layers.flatMap((layer) =>
    PATHS.flatMap((path) =>
      Object.keys(FAULTS).map(
        (fault) => [layer, path, fault] as [OutageLayer, string, keyof typeof FAULTS],
      ),
    ),
  );

  it.each(cells)(
    '%s, %s: when %s, 503 and nothing kept; the retry runs once',
    async (layer, path, fault) => {
      const tag = `${layer}-${path}-${fault.split(' ')[3]}`;
      const send = () =>
        path === 'graphql'
          ? request(app.getHttpServer())
              .post('/graphql')
              .set('Idempotency-Key', tag)
              .send({ query: `mutation { write(layer: "${layer}", tag: "${tag}") { rows } }` })
          : request(app.getHttpServer())
              .post(`/${path}/${layer}`)
              .set('Idempotency-Key', tag)
              .send({ tag });

      const first = send().then((response) => response);
      await reachedGate(tag);
      await FAULTS[fault](database, proxy);
      openGate(tag);
      const failed = await first;
      if (path === 'graphql') {
        // A field's refusal is a GraphQL error with the problem's code and its retry hint.
        expect(failed.body.data).toBeNull();
        expect(failed.body.errors[0].extensions).toMatchObject({
          code: 'store_unavailable',
          status: 503,
        });
      } else {
        expect({ status: failed.status, code: failed.body.code }).toEqual({
          status: 503,
          code: 'store_unavailable',
        });
        expect(failed.headers['retry-after']).toBeDefined();
      }
      expect(await rows(tag)).toEqual([]);

      const retried = await send();
      expect(retried.status).toBe({ messages: 200, graphql: 200 }[path as string] ?? 201);
      if (path === 'graphql') expect(retried.body).toEqual({ data: { write: { rows: 2 } } });
      expect(await rows(tag)).toEqual([1, 2]);
      const again = await send();
      expect(again.status).toBe(retried.status);
      if (path === 'messages') expect(again.body).toEqual({ duplicate: true });
      else if (path === 'graphql') expect(again.body.data).toEqual(retried.body.data);
      else expect(again.headers['idempotent-replayed']).toBe('true');
      expect(await rows(tag)).toEqual([1, 2]);
    },
  );
});
