import { Controller, HttpCode, Module, Post } from '@nestjs/common';
import pg, { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';
import { type Scenario, startScenario } from './support/scenario.js';
import { ADAPTERS } from './support/test-app.js';

/**
 * A uuid parser of the app's (`pg.types.setTypeParser(2950, …)`, global) must not reach the
 * library's read of a stored body's id. With `largeResponses`, the body goes to
 * `idempotency_response_bodies` in the request's transaction (lib/answer/bodies/
 * postgres-body.store.ts `PUT_BODY`, sent through the transaction's `query`; a handler that
 * wrote nothing has begun no transaction, and that statement went on TypeORM's query runner or
 * the pool seam's own path, read with the app's parsers), and its id becomes the key's body
 * pointer: read by the app's parser, the pointer named no body and every replay answered 500.
 * `RETURNING id::text` is text (oid 25), which no parser of uuid touches.
 */
describe.each(ADAPTERS)('large responses with an app uuid parser on %s', (adapter) => {
  let s: Scenario;

  beforeAll(async () => {
    s = await startScenario('large_uuid_parser', adapter, {
      largeResponses: { overBytes: 1 },
      replayCacheSize: 0,
    });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('the replay of a handler that wrote nothing finds its body', async () => {
    const was = pg.types.getTypeParser(2950, 'text');
    pg.types.setTypeParser(2950, (text: string) => `uuid:${text.toUpperCase()}`);
    try {
      const order = () =>
        request(s.server())
          .post('/noop')
          .set('Idempotency-Key', `uuid-parser-${adapter}`)
          .set('X-Tenant-Id', '1')
          .send({});
      const first = await order();
      expect(first.status).toBe(201);
      const replay = await order();
      expect(replay.status).toBe(201);
      expect(replay.body).toEqual(first.body);
    } finally {
      pg.types.setTypeParser(2950, was);
    }
  });
});

/** The same on the app's node-postgres pool (`pool`: the pool seam's own path). */
describe('large responses with an app uuid parser on the pool seam', () => {
  const stack: { pool?: Pool } = {};
  let fixture: PoolApp;

  @Controller('noop')
  class NoopController {
    @Post()
    @HttpCode(201)
    @Idempotent()
    noop() {
      return { ok: true };
    }
  }

  @Module({
    imports: [
      IdempotencyModule.forRootAsync({
        useFactory: () => ({
          globalKeys: true,
          pool: stack.pool!,
          replayCacheSize: 0,
          largeResponses: { overBytes: 1 },
        }),
      }),
    ],
    controllers: [NoopController],
  })
  class NoopModule {}

  beforeAll(async () => {
    fixture = await startPoolApp('large_uuid_parser_pool', {
      module: NoopModule,
      max: 4,
      usePool: (started) => {
        stack.pool = started;
      },
    });
  }, 120_000);

  afterAll(async () => {
    await fixture?.close();
  });

  it('the replay of a handler that wrote nothing finds its body', async () => {
    const was = pg.types.getTypeParser(2950, 'text');
    pg.types.setTypeParser(2950, (text: string) => `uuid:${text.toUpperCase()}`);
    try {
      const post = async () => {
        const answer = await request(fixture.app.getHttpServer())
          .post('/noop')
          .set('Idempotency-Key', 'key-1')
          .send({})
          .timeout(20_000);
        return `${answer.status} ${JSON.stringify(answer.body)}`;
      };
      expect(await post()).toBe('201 {"ok":true}');
      expect(await post()).toBe('201 {"ok":true}');
    } finally {
      pg.types.setTypeParser(2950, was);
    }
  }, 60_000);
});
