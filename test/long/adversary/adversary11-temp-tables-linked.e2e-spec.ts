import { Body, Controller, Module, Post } from '@nestjs/common';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Kysely on the pool given to the library, docs/guides/kysely.md): imports an
 * order in one Kysely transaction that stages it in two temporary tables, a head and its lines
 * (the lines reference the head by a foreign key), both `ON COMMIT DROP` (or both
 * `ON COMMIT DELETE ROWS`, made once per session with `IF NOT EXISTS`), then moves them into
 * the real tables. PostgreSQL ends both at the COMMIT together: it drops ON COMMIT DROP tables
 * with CASCADE, and truncates all ON COMMIT DELETE ROWS tables in one go (a foreign key
 * between them is no obstacle): without the library, 201.
 *
 * What happens: round 10's ending after the nested transaction's RELEASE drops the tables one
 * at a time without CASCADE (`DROP TABLE IF EXISTS pg_temp."order_head"`: 2BP01 "cannot drop
 * table order_head because other objects depend on it"), or truncates them one at a time
 * (`TRUNCATE pg_temp."order_head"`: 0A000 "cannot truncate a table referenced in a foreign key
 * constraint"). The nested COMMIT fails (the RELEASE already done, Kysely's ROLLBACK after it
 * then meets 3B001 "savepoint idempotency_nested_1 does not exist"): 500, kept as the key's
 * answer and replayed, the order never imported.
 *
 * What should happen: as without the library: the tables ended at the nested COMMIT; 201 once,
 * the order imported once.
 */
let db: Kysely<any>; // eslint-disable-line @typescript-eslint/no-explicit-any

type Db = typeof db;

type Order = { id: string; lines: string[] };

const makers = {
  dropped: async (trx: Db) => {
    await sql`CREATE TEMP TABLE order_head (id text PRIMARY KEY) ON COMMIT DROP`.execute(trx);
    await sql`CREATE TEMP TABLE order_lines (head text REFERENCES order_head, item text)
      ON COMMIT DROP`.execute(trx);
  },
  emptied: async (trx: Db) => {
    await sql`CREATE TEMP TABLE IF NOT EXISTS order_head_e (id text PRIMARY KEY)
      ON COMMIT DELETE ROWS`.execute(trx);
    await sql`CREATE TEMP TABLE IF NOT EXISTS order_lines_e (head text REFERENCES order_head_e, item text)
      ON COMMIT DELETE ROWS`.execute(trx);
  },
};

async function importOrder(how: 'dropped' | 'emptied', { id, lines }: Order) {
  const head = how === 'dropped' ? 'order_head' : 'order_head_e';
  const line = how === 'dropped' ? 'order_lines' : 'order_lines_e';
  await db
    .transaction()
    .execute(async (trx) => {
      await makers[how](trx);
      await sql`INSERT INTO ${sql.table(head)} VALUES (${id})`.execute(trx);
      for (const item of lines) {
        await sql`INSERT INTO ${sql.table(line)} VALUES (${id}, ${item})`.execute(trx);
      }
      await sql`INSERT INTO orders (id) SELECT id FROM ${sql.table(head)}`.execute(trx);
      await sql`INSERT INTO order_items (order_id, item) SELECT head, item FROM ${sql.table(line)}`.execute(
        trx,
      );
    })
    .catch((error: unknown) => {
      if (process.env.ADV_DEBUG) console.log(String(error));
      throw error;
    });
  return { id, lines: lines.length };
}

@Controller()
class ImportsController {
  @Post('plain/:how')
  plain(@Body() body: Order & { how: 'dropped' | 'emptied' }) {
    return importOrder(body.how, body);
  }

  @Post('idempotent/:how')
  @Idempotent()
  idempotent(@Body() body: Order & { how: 'dropped' | 'emptied' }) {
    return importOrder(body.how, body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool: poolOf() }) }),
  ],
  controllers: [ImportsController],
})
class ImportsModule {}

let pool: Pool;
const poolOf = () => pool;

describe('adversary 11: two temporary tables ON COMMIT linked by a foreign key fail the nested COMMIT', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv11_temp_linked', {
      module: ImportsModule,
      usePool: (started) => {
        pool = started;
        db = new Kysely({ dialect: new PostgresDialect({ pool: started }) });
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id text PRIMARY KEY)');
        await admin.query('CREATE TABLE order_items (order_id text NOT NULL, item text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, how: string, id: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ how, id, lines: ['a', 'b'] });
  };

  const itemsOf = async (id: string) => {
    const { rows } = await fixture.admin.query<{ item: string }>(
      'SELECT item FROM order_items WHERE order_id = $1 ORDER BY item',
      [id],
    );
    return rows.map((row) => row.item);
  };

  it.each(['dropped', 'emptied'])(
    'without the library (no @Idempotent), %s: 201, the order imported (control)',
    async (how) => {
      const answer = await post(`/plain/${how}`, how, `plain-${how}`);
      expect(answer.status).toBe(201);
      expect(await itemsOf(`plain-${how}`)).toEqual(['a', 'b']);
    },
    30_000,
  );

  it.each(['dropped', 'emptied'])(
    'under @Idempotent(), %s: 201 once, the order imported once',
    async (how) => {
      const answers: { status: number; body: unknown }[] = [];
      for (let attempt = 0; attempt < 3; attempt++) {
        const answer = await post(`/idempotent/${how}`, how, `order-${how}`, `key-${how}`);
        answers.push({ status: answer.status, body: answer.body });
        if (answer.status < 500) break;
      }
      expect({ answers, items: await itemsOf(`order-${how}`) }).toEqual({
        answers: [{ status: 201, body: { id: `order-${how}`, lines: 2 } }],
        items: ['a', 'b'],
      });
    },
    30_000,
  );
});
