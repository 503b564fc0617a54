import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { getDataSourceToken, InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { type DataSource } from 'typeorm';
import request from 'supertest';
import {
  ClaimStore,
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  type IdempotencyModuleOptions,
  Idempotent,
} from '../lib/index.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

@Controller()
class CounterController {
  constructor(@InjectDataSource('payments') private readonly dataSource: DataSource) {}

  @Post('count')
  @Idempotent()
  async count(@Body() body: { n: number }) {
    const rows = (await this.dataSource.query('SELECT nextval($1) AS v', ['counter'])) as {
      v: string;
    }[];
    return { n: body.n, v: Number(rows[0].v) };
  }
}

async function createApp(
  url: string,
  dataSource: string,
  keys: IdempotencyModuleOptions = { globalKeys: true },
): Promise<INestApplication> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        name: 'payments',
        type: 'postgres',
        url,
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
      }),
      IdempotencyModule.forRootAsync({
        useFactory: async () => ({
          dataSource,
          headerName: 'X-Request-Key',
          fingerprintHeaders: ['Accept'],
          ...keys,
        }),
      }),
    ],
    controllers: [CounterController],
  })
  class AsyncAppModule {}
  const app = await NestFactory.create(AsyncAppModule, new ExpressAdapter(), {
    logger: false,
    abortOnError: false,
  });
  await app.init();
  return app;
}

describe('forRootAsync on a named DataSource, with a custom header', () => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('options');
    app = await createApp(database.url, 'payments');
    await app
      .get<DataSource>(getDataSourceToken('payments'), { strict: false })
      .query('CREATE SEQUENCE counter');
  });
  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  const count = (key: string | undefined, accept = 'application/json') => {
    const req = request(app.getHttpServer()).post('/count').set('Accept', accept);
    return (key === undefined ? req : req.set('X-Request-Key', key)).send({ n: 1 });
  };

  it('reads the key from the configured header and stores in the named DataSource', async () => {
    const first = await count('k1');
    expect(first.status).toBe(201);
    const again = await count('k1');
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
  });

  it('gives code that injects ClaimStore the PostgreSQL store of the named DataSource', async () => {
    const store = app.get<ClaimStore>(ClaimStore, { strict: false });
    expect(store.transactional).toBe(true);
    const found = await store.claim({ tenantId: '0', key: 'k1' }, Buffer.alloc(32), 60_000);
    expect(found.kind).toBe('existing'); // the key the test above stored there
  });

  it('names the configured header when it is missing; Idempotency-Key is not it', async () => {
    const res = await request(app.getHttpServer())
      .post('/count')
      .set('Idempotency-Key', 'k2')
      .send({ n: 1 });
    expect(res.status).toBe(400);
    expect(res.body.detail).toBe(
      'The X-Request-Key header is required on this route; send one key per operation.',
    );
  });

  it('makes a configured header part of the fingerprint', async () => {
    expect((await count('k3', 'application/json')).status).toBe(201);
    const other = await count('k3', 'text/csv');
    expect(other.status).toBe(422);
  });

  it('fails at start-up when keys have no tenant and the app did not declare them global', async () => {
    // TypeScript refuses it too (TenantScope); the start-up check is for JavaScript callers.
    // @ts-expect-error neither tenant nor globalKeys
    await expect(createApp(database.url, 'payments', {})).rejects.toThrow(
      'IdempotencyModule: tenant is required',
    );
  });

  it('fails at start-up, naming the problem, when the DataSource does not exist', async () => {
    await expect(createApp(database.url, 'nope')).rejects.toThrow(
      'IdempotencyModule: no TypeORM DataSource named "nope" was found',
    );
  });
});
