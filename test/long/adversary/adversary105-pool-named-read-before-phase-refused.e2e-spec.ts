/**
 * Fixed (session of 2026-12-07): a named plain read runs apart as an unnamed one does:
 * lib/connection/prefixed-query.ts `apartStatement` (table in prefixed-query.spec.ts) carries a
 * config with a `name` without it, and lib/data-layers/pool-transaction.ts `readApart` sends it so,
 * on the connection apart behind the read-only prefix (parsed there once, unnamed: no per-
 * connection prepared state to keep; the same text and values read the same rows). It no longer
 * begins the request's transaction, so the phase after it runs.
 *
 * Adversary 105 (pool): a plain read sent as a named prepared statement (Drizzle's
 * `.prepare('name')`, node-postgres' `{ name, text, values }`) before the first phase is not
 * run apart: it begins the request's transaction, and the phase after it is refused
 * (`PhaseOrderError`, a 500 stored as the handler's answer). The same read unnamed runs apart
 * and the phases run.
 *
 * User code (Drizzle's documented way to prepare a hot query once):
 *   const getItem = db.select().from(items).where(eq(items.sku, sql.placeholder('sku')))
 *     .prepare('get_item');
 *   @Post() @Idempotent()
 *   async buy(@Body() { sku }) {
 *     const [item] = await getItem.execute({ sku });           // a plain read of a table
 *     await phases.run('reserved', () => db.insert(orders).values({ sku, item: item.id }));
 *     return phases.finish(async () => ({ sku }));
 *   }
 *
 * Code path: lib/data-layers/pool-join.ts `joiningQuery` -> lib/data-layers/pool-transaction.ts
 * `statement` -> `readApart` -> lib/connection/prefixed-query.ts `queryStatement`, which
 * returns undefined for a config with a `name` ("node-postgres keeps a named statement's parse
 * state per name"): the read goes to the request's connection and begins its transaction; the
 * phase started next is refused by lib/phases (a write or a transaction-beginning read before a
 * phase).
 *
 * Docs quote: phases.md: "a phase started after one of them is refused (`PhaseOrderError`, a
 * 500 stored as the handler's answer) … while a plain read of a table (a `WITH` of reads too)
 * runs apart and is let through"; data-layers.md: "a plain `SELECT` before it runs apart, on a
 * connection of its own".
 *
 * Severity: medium (a false refusal of working code: a 500 stored and replayed for a read that
 * works unnamed and works without the library; nothing committed twice).
 *
 * Fails now: the prepared (named) read answers 500 (`PhaseOrderError`), replayed; unnamed (the
 * control) answers 201. The same with node-postgres' own `{ name, text, values }`, and with
 * Prisma on `new PrismaPg(pool, { statementNameGenerator })` (the adapter's documented statement
 * cache, which names every query): any Prisma read before the first phase is refused. The
 * refusal's message misleads: "a write outside a phase begins it, and so does a read on a route
 * above READ COMMITTED" (neither happened).
 *
 * Controls: the same handler with the read unnamed answers 201 and replays.
 *
 * Suggested fix: run a named plain read apart too: on the connection apart, without its name
 * (the read-only prefix needs the unnamed statement; the name is only a parse cache), or as it
 * is, with `SET TRANSACTION READ ONLY` sent before it in a `BEGIN … COMMIT` of its own there.
 */
import { Body, Controller, HttpCode, Module, Param, Post } from '@nestjs/common';
import { eq, sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { pgTable, serial, text } from 'drizzle-orm/pg-core';
import { createHash } from 'node:crypto';
import { PrismaPg } from '@prisma/adapter-pg';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner } from '../../../lib/index.js';
import { PrismaClient } from '../../examples/support/prisma-on-call/generated/client.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const items = pgTable('items', { id: serial('id').primaryKey(), sku: text('sku').notNull() });
const orders = pgTable('orders', { id: serial('id').primaryKey(), sku: text('sku').notNull() });

let pool: Pool;
let db: NodePgDatabase;
let prisma: PrismaClient;
let getItem: { execute(placeholders: { sku: string }): Promise<unknown[]> };
const refusals: string[] = [];

@Controller('orders')
class OrdersController {
  constructor(private readonly phases: PhaseRunner) {}

  @Post(':how')
  @HttpCode(201)
  @Idempotent()
  async buy(@Param('how') how: string, @Body() { sku }: { sku: string }) {
    const found =
      how === 'unnamed'
        ? await db.select().from(items).where(eq(items.sku, 'x'))
        : how === 'prepared'
          ? await getItem.execute({ sku: 'x' })
          : how === 'prisma'
            ? await prisma.doctor.findMany({ where: { shift: 'night' } })
            : (
                await pool.query({
                  name: 'find_item',
                  text: 'SELECT id, sku FROM items WHERE sku = $1',
                  values: ['x'],
                })
              ).rows;
    try {
      await this.phases.run('reserved', async () => {
        await db.insert(orders).values({ sku });
        return { reserved: true };
      });
    } catch (error) {
      refusals.push(`${how}: ${(error as Error).constructor.name}`);
      throw error;
    }
    return this.phases.finish(async () => ({ sku, found: found.length }));
  }
}

describe('adversary 105 pool: a named plain read before a phase begins the request transaction', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [OrdersController],
    })
    class OrdersModule {}
    fixture = await startPoolApp('adv105_pool_named_read_phase', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
        // Prisma's statement cache: every query named by its text's hash.
        const statementNameGenerator = (query: { sql: string }) =>
          `p_${createHash('sha1').update(query.sql).digest('hex').slice(0, 16)}`;
        prisma = new PrismaClient({ adapter: new PrismaPg(started, { statementNameGenerator }) });
        getItem = db
          .select()
          .from(items)
          .where(eq(items.sku, sql.placeholder('sku')))
          .prepare('get_item');
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE items (id serial PRIMARY KEY, sku text NOT NULL)`);
        await owner.query(`INSERT INTO items (sku) VALUES ('x')`);
        await owner.query(`CREATE TABLE orders (id serial PRIMARY KEY, sku text NOT NULL)`);
        await owner.query(
          `CREATE TABLE doctors (id serial PRIMARY KEY, shift text NOT NULL, name text NOT NULL, on_call boolean NOT NULL)`,
        );
        await owner.query(`INSERT INTO doctors (shift, name, on_call) VALUES ('night', 'a', true)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await prisma?.$disconnect();
    await fixture?.close();
  });

  async function buyTwice(how: string) {
    const post = async () => {
      const answer = await request(fixture.app.getHttpServer())
        .post(`/orders/${how}`)
        .set('Idempotency-Key', `key-${how}`)
        .send({ sku: how })
        .timeout(20_000);
      return answer.status;
    };
    const first = await post();
    const retried = await post();
    const { rows } = await fixture.admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM orders WHERE sku = $1`,
      [how],
    );
    return { first, retried, rows: rows[0].n };
  }

  it('control: the same read unnamed runs apart, and the phase runs', async () => {
    expect(await buyTwice('unnamed')).toEqual({ first: 201, retried: 201, rows: 1 });
  }, 60_000);

  it('a named plain read before a phase runs apart as an unnamed one does', async () => {
    const prepared = await buyTwice('prepared');
    const pgNamed = await buyTwice('pg-named');
    const prismaNamed = await buyTwice('prisma');
    expect({ prepared, pgNamed, prismaNamed, refusals }).toEqual({
      prepared: { first: 201, retried: 201, rows: 1 },
      pgNamed: { first: 201, retried: 201, rows: 1 },
      prismaNamed: { first: 201, retried: 201, rows: 1 },
      refusals: [],
    });
  }, 60_000);
});
