import { type INestApplication } from '@nestjs/common';
import request from 'supertest';
import { createOutageApp, openGate, type OutageLayer, reachedGate } from '../support/outage-app.js';
import { createOutageDatabase, type OutageDatabase } from '../support/outage-database.js';
import { MID_WORK_FAULTS as FAULTS } from '../support/outage-faults.js';

/**
 * The database fails while a handler's work is under way, on every data layer the library
 * joins and every path (a request, a phase, a consumer's delivery): the answer is a 503 with
 * Retry-After, nothing of the work is kept, nothing is stored, and the retry runs it once.
 * (A consumer under `@IdempotentMessage()`, on its brokers: test/outage-messages.e2e-spec.ts.)
 */
const PATHS = ['requests', 'phases', 'messages', 'graphql'] as const;

describe.each([
  ['TypeORM', true, ['typeorm']],
  ['a pg.Pool', false, ['pg', 'prisma', 'drizzle', 'kysely']],
] as const)('the database failing mid-work, on %s', (_name, typeorm, layers) => {
  let db: OutageDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    db = await createOutageDatabase(`outage_${typeorm ? 'typeorm' : 'pool'}`, typeorm);
    app = await createOutageApp(db.viaProxy, typeorm);
  });

  afterAll(async () => {
    await app?.close();
    await db?.drop();
  });

  const rows = (tag: string) => db.rows(tag);

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
      await FAULTS[fault](db.database, db.proxy);
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
