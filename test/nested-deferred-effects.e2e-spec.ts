import { Body, Controller, Module, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Client, escapeLiteral, type Pool } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';
import { startTypeormApp, type TypeormApp } from './support/typeorm-app.js';

/**
 * What a nested transaction's COMMIT does with what was deferred to it, on both seams: a
 * deferred constraint trigger's effects (an audit row written `DEFERRABLE INITIALLY
 * DEFERRED`) are there once it commits, as its own COMMIT leaves them without the library, and
 * the constraints' modes are their initial ones after it (a second nested transaction may
 * insert a child before its parent under a deferred foreign key). Adversary round 11 found the
 * effects unseen until the request's COMMIT (its check was a trial run, rolled back).
 */
async function setup(admin: Client) {
  await admin.query('CREATE TABLE orders (id text PRIMARY KEY)');
  await admin.query('CREATE TABLE audit (order_id text NOT NULL)');
  await admin.query(
    `CREATE FUNCTION audit_order() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN INSERT INTO audit VALUES (NEW.id); RETURN NULL; END $$`,
  );
  await admin.query(
    `CREATE CONSTRAINT TRIGGER audit_order AFTER INSERT ON orders
     DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION audit_order()`,
  );
  await admin.query('CREATE TABLE parents (id text PRIMARY KEY)');
  await admin.query(
    'CREATE TABLE children (parent text NOT NULL REFERENCES parents DEFERRABLE INITIALLY DEFERRED)',
  );
}

type Run = (text: string, values: unknown[]) => Promise<{ n?: number }[]>;
type Nest = (work: (run: Run) => Promise<void>) => Promise<void>;

/** The handler's work: an order in one transaction, its audit read, a child before its parent. */
async function place(id: string, nest: Nest, run: Run) {
  await nest((tx) => tx('INSERT INTO orders VALUES ($1)', [id]).then(() => undefined));
  const [row] = await run('SELECT count(*)::int AS n FROM audit WHERE order_id = $1', [id]);
  await nest(async (tx) => {
    await tx('INSERT INTO children VALUES ($1)', [id]);
    await tx('INSERT INTO parents VALUES ($1)', [id]);
  });
  return { id, audited: row.n };
}

let db: NodePgDatabase;
// The test's own ids only: written into the text, as Drizzle's `sql.raw` takes it.
const drizzleRun: (on: Pick<NodePgDatabase, 'execute'>) => Run = (on) => async (text, values) =>
  (await on.execute(sql.raw(text.replace('$1', escapeLiteral(String(values[0])))))).rows as {
    n?: number;
  }[];
const drizzlePlace = (id: string) =>
  place(id, (work) => db.transaction((tx) => work(drizzleRun(tx))), drizzleRun(db));

@Controller()
class DrizzleOrders {
  @Post('plain')
  plain(@Body() body: { id: string }) {
    return drizzlePlace(body.id);
  }

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: { id: string }) {
    return drizzlePlace(body.id);
  }
}

let pool: Pool;
@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [DrizzleOrders],
})
class DrizzleModule {}

@Controller()
class TypeormOrders {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private place(id: string) {
    return place(
      id,
      (work) => this.dataSource.transaction((manager) => work((t, v) => manager.query(t, v))),
      (t, v) => this.dataSource.query(t, v),
    );
  }

  @Post('plain')
  plain(@Body() body: { id: string }) {
    return this.place(body.id);
  }

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: { id: string }) {
    return this.place(body.id);
  }
}

async function expectOnce(server: unknown, admin: Client) {
  const plain = await request(server as never)
    .post('/plain')
    .send({ id: 'plain-1' });
  expect({ status: plain.status, body: plain.body as unknown }).toEqual({
    status: 201,
    body: { id: 'plain-1', audited: 1 },
  });
  const answers = [];
  for (let attempt = 0; attempt < 2; attempt++) {
    const answer = await request(server as never)
      .post('/keyed')
      .set('Idempotency-Key', 'order-1')
      .send({ id: 'order-1' });
    answers.push({ status: answer.status, body: answer.body as unknown });
  }
  const { rows } = await admin.query(
    "SELECT (SELECT count(*)::int FROM audit WHERE order_id = 'order-1') AS audit, " +
      "(SELECT count(*)::int FROM children WHERE parent = 'order-1') AS children",
  );
  expect({ answers, rows: rows[0] as unknown }).toEqual({
    answers: [
      { status: 201, body: { id: 'order-1', audited: 1 } },
      { status: 201, body: { id: 'order-1', audited: 1 } },
    ],
    rows: { audit: 1, children: 1 },
  });
}

describe('a nested transaction commits what was deferred to its COMMIT', () => {
  describe('on the pool seam (Drizzle)', () => {
    let fixture: PoolApp;
    beforeAll(async () => {
      fixture = await startPoolApp('nested_deferred_effects_pool', {
        module: DrizzleModule,
        usePool: (started) => {
          pool = started;
          db = drizzle({ client: started });
        },
        setup,
      });
    }, 60_000);
    afterAll(() => fixture?.close());

    it('the trigger’s audit row is there after it, once; the foreign key deferred again', () =>
      expectOnce(fixture.app.getHttpServer(), fixture.admin));
  });

  describe('on TypeORM', () => {
    let fixture: TypeormApp;
    beforeAll(async () => {
      fixture = await startTypeormApp('nested_deferred_effects_typeorm', {
        controllers: [TypeormOrders],
        setup,
      });
    }, 60_000);
    afterAll(() => fixture?.close());

    it('the trigger’s audit row is there after it, once; the foreign key deferred again', () =>
      expectOnce(fixture.app.getHttpServer(), fixture.admin));
  });
});
