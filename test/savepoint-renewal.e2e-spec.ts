import { Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../lib/index.js';
import { bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

/**
 * Found by an adversarial review (issue 27). A route above READ COMMITTED renews its lease inside the request's transaction
 * (`renewalRoute` 'inside'). A renewal sent while the handler is inside a nested transaction
 * (TypeORM's `dataSource.transaction()` within the request's: a SAVEPOINT) is part of it: when
 * the handler's nested transaction fails and rolls back to its savepoint, PostgreSQL undoes the
 * renewal and drops the row lock it took. The key's lease is back to what the claim gave it,
 * long past, and nothing holds the row: a retry takes a live, heartbeating worker's key over
 * and runs the handler a second time, beside the first.
 */
const LEASE_MS = 3000;

let executions = 0;
let rolledBack!: () => void;
let whenRolledBack = new Promise<void>((resolve) => (rolledBack = resolve));
let goOn!: () => void;
let whenGoOn = new Promise<void>((resolve) => (goOn = resolve));

@Controller()
class PaymentsController {
  constructor(private readonly dataSource: DataSource) {}

  @Post('payments')
  @Idempotent({ isolationLevel: 'REPEATABLE READ', leaseMs: LEASE_MS })
  async create() {
    const execution = ++executions;
    await this.dataSource.query('INSERT INTO effects (execution) VALUES ($1)', [execution]);
    if (execution === 1) {
      // A nested transaction that outlives a heartbeat or two, then fails: its savepoint is
      // rolled back, as the handler's own error handling asks (it catches and goes on).
      await this.dataSource
        .transaction(async (manager) => {
          await manager.query('SELECT 1');
          await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 500));
          throw new Error('the nested work failed');
        })
        .catch(() => undefined);
      rolledBack();
      await whenGoOn;
    }
    return { execution };
  }

  @Post('aborted')
  @Idempotent({ isolationLevel: 'REPEATABLE READ', leaseMs: LEASE_MS })
  async aborted() {
    const execution = ++executions;
    await this.dataSource.query('INSERT INTO effects (execution) VALUES ($1)', [execution]);
    if (execution === 1) {
      // A nested transaction whose statement fails (caught: the handler logs it, say) and
      // that rolls back to its savepoint a heartbeat later; the handler then goes on with a
      // slow call of its own, longer than the lease, its heartbeat supposed to cover it.
      await this.dataSource
        .transaction(async (manager) => {
          await manager.query('SELECT 1 / 0').catch(() => undefined);
          await new Promise((resolve) => setTimeout(resolve, LEASE_MS / 3 + 500));
          throw new Error('the nested work failed');
        })
        .catch(() => undefined);
      await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 500));
      rolledBack();
      await whenGoOn;
    }
    return { execution };
  }
}

@Module({ controllers: [PaymentsController] })
class PaymentsModule {}

describe('adversary: a lease renewed inside a savepoint that is rolled back', () => {
  let database: TestDatabase;
  let app: INestApplication;
  let db: Client;

  beforeAll(async () => {
    database = await createTestDatabase('adv_savepoint_renewal');
    const migrations = new DataSource({
      type: 'postgres',
      url: database.url,
      migrations: IDEMPOTENCY_MIGRATIONS,
    });
    await migrations.initialize();
    await migrations.runMigrations();
    await migrations.destroy();
    db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query('CREATE TABLE effects (execution int NOT NULL)');
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: database.url, logging: false }),
        IdempotencyModule.forRoot({ globalKeys: true }),
        PaymentsModule,
      ],
    })
    class AppModule {}
    app = await bootstrapTestApp(AppModule, 'express');
  });

  afterAll(async () => {
    goOn?.();
    await app?.close();
    await db?.end();
    await database?.drop();
  });

  const pay = (key: string, path = '/payments') =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send({ amount: 1 });

  // The worker is alive: the retry is told 409 key_in_progress and the handler runs once. It
  // did not: the renewal was undone with the savepoint, the retry took the key over (201) and
  // ran the handler a second time while the first still ran (the first then 503
  // database_transient, its effects rolled back: the database's effects once, the handler's
  // external calls twice). Now the BEGIN renews the lease itself (`holdAtBegin`), so the row
  // stays locked by the request's transaction whatever its savepoints do.
  it('keeps a live worker’s key through a rolled-back savepoint', async () => {
    executions = 0;
    whenRolledBack = new Promise<void>((resolve) => (rolledBack = resolve));
    whenGoOn = new Promise<void>((resolve) => (goOn = resolve));
    const first = pay('savepoint');
    const firstDone = first.then((response) => response);
    await whenRolledBack;
    const retry = await pay('savepoint');
    goOn();
    const answered = await firstDone;
    expect({ status: retry.status, code: retry.body.code, executions }).toEqual({
      status: 409,
      code: 'key_in_progress',
      executions: 1,
    });
    expect(answered.status).toBe(201);
    expect((await db.query('SELECT execution FROM effects')).rows).toEqual([{ execution: 1 }]);
  });

  // As above, 409 key_in_progress to the retry, the handler once. It was not: a renewal that
  // met the nested transaction's aborted state (25P02) stopped the heartbeat for good, though
  // the savepoint's rollback made the transaction whole again; the lease ran out under the
  // live worker, and the retry took the key over (201) and ran the handler a second time.
  it('keeps renewing after a renewal met an aborted savepoint', async () => {
    executions = 0;
    whenRolledBack = new Promise<void>((resolve) => (rolledBack = resolve));
    whenGoOn = new Promise<void>((resolve) => (goOn = resolve));
    const first = pay('aborted', '/aborted').then((response) => response);
    await whenRolledBack;
    const retry = await pay('aborted', '/aborted');
    goOn();
    const answered = await first;
    expect({ status: retry.status, code: retry.body.code, executions }).toEqual({
      status: 409,
      code: 'key_in_progress',
      executions: 1,
    });
    expect(answered.status).toBe(201);
  });
});
