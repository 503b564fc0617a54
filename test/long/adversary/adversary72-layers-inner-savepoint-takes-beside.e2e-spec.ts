/**
 * Adversary 72: a write sent beside a data layer's INNER savepoint (Drizzle's nested
 * `tx.transaction()`, Kysely's `trx.savepoint()`, Prisma 7's nested `tx.$transaction()`), through the injected `db` rather than the
 * transaction's handle (an audit service that writes with its own `db`), is rolled back with
 * that savepoint in silence, and the request answers 201 with it stored. Without the library
 * that write commits on a connection of its own and is kept; with it, it lands inside the
 * inner savepoint on the request's one connection, and Drizzle's `rollback to savepoint sp1`
 * (Kysely's `rollbackToSavepoint()`) takes it along. The library refuses that very case for
 * the OUTERMOST nested transaction (`StatementBesideNestedTransactionError`, 500, nothing
 * kept), but an inner one is Drizzle's/Kysely's own `SAVEPOINT` text, which it never watches.
 *
 *   await db.transaction(async (tx) => {
 *     await tx.insert(notes).values({ tag, what: 'outer' });
 *     await tx.transaction(async (gift) => {            // savepoint sp1
 *       await gift.insert(notes).values({ tag, what: 'gift' });
 *       await db.insert(notes).values({ tag, what: 'audit' }); // the service's own `db`
 *       gift.rollback();                                  // rollback to savepoint sp1
 *     }).catch(() => undefined);
 *   });
 *
 * Why: `PoolTransaction.markBeside` (lib/data-layers/pool-transaction.ts) marks only the
 * library's own savepoints (those a view's `BEGIN` made), and `rollBack()` refuses only their
 * rollback; a data layer's own `SAVEPOINT sp1` / `ROLLBACK TO SAVEPOINT sp1` go through
 * `statement()` as plain statements (`nestedControlOf` does not read them; `transactionControlOf`
 * lets `ROLLBACK TO` through, lib/transaction/sql/sql-text.ts), so the `pool.query()` sent in
 * between is rolled back with no refusal.
 *
 * Expected (docs/guides/data-layers.md): "A statement sent beside an open nested transaction
 * (through `pool.query()`, as `db` instead of `trx` inside a transaction's callback ...) runs
 * inside it ... If that nested transaction commits, both are kept; if it rolls back, it would
 * take the statement along, where without the library that statement commits on a connection
 * of its own, so the rollback is refused with `StatementBesideNestedTransactionError` and the
 * whole request rolls back." drizzle.md: "a `tx.transaction(fn)` nested in it" is "a savepoint
 * of the request's transaction" like the outer one. So: the audit kept (as without the
 * library), or the request refused (500, nothing kept); never a stored 201 without it.
 *
 * Control: the same code on the same route with the OUTER transaction rolled back (the audit
 * beside it): refused, 500, nothing kept; and the inner case on a route without
 * `@Idempotent()` keeps the audit row (what the app means).
 *
 * Severity: high (a write the handler awaited successfully is lost while the answer that
 * says it happened is stored and replayed; Drizzle's nested `tx.transaction()` and Kysely's
 * savepoints are documented forms).
 *
 * Fails now: 'Expected: "audit kept or refused", Received: "201 stored, notes [\"outer\"]:
 * the audit row is gone"', for Drizzle's `tx.transaction()`, Kysely's `savepoint()` /
 * `rollbackToSavepoint()` and Prisma's nested `tx.$transaction()` alike (the six controls
 * pass).
 *
 * Fixed: the data layers' own savepoints inside their nested transactions are followed
 * (`savepointControlOf`, `InnerSavepoint` in lib/data-layers/pool-transaction.ts): a statement
 * beside one marks it, and a ROLLBACK TO one that holds such a statement refuses the request
 * (500, nothing kept), as the outer nested transaction's rollback does.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { integer, pgTable, serial, text } from 'drizzle-orm/pg-core';
import { PrismaPg } from '@prisma/adapter-pg';
import { Kysely, PostgresDialect } from 'kysely';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { PrismaClient } from '../../../docs/snippets/prisma/src/generated/prisma/client.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const notes = pgTable('adv72_notes', {
  id: serial('id').primaryKey(),
  tag: text('tag').notNull(),
  what: text('what').notNull(),
  n: integer('n'),
});

interface KyselyDb {
  adv72_notes: { id?: number; tag: string; what: string; n?: number | null };
}

let pool: Pool;
let db: NodePgDatabase;
let kdb: Kysely<KyselyDb>;
let prisma: PrismaClient;

type Layer = 'drizzle' | 'kysely' | 'prisma';
type Body72 = { tag: string; layer: Layer; outer?: boolean };

/** Prisma 7's interactive transaction client, whose `$transaction` nests (a SAVEPOINT). */
type PrismaTx = Parameters<Parameters<PrismaClient['$transaction']>[0]>[0] & {
  $transaction<T>(work: (tx: PrismaTx) => Promise<T>): Promise<T>;
};
const note = (client: { $executeRaw: PrismaClient['$executeRaw'] }, tag: string, what: string) =>
  client.$executeRaw`INSERT INTO adv72_notes (tag, what) VALUES (${tag}, ${what})`;

async function work(body: Body72) {
  const { tag } = body;
  if (body.layer === 'drizzle') {
    await db
      .transaction(async (tx) => {
        await tx.insert(notes).values({ tag, what: 'outer' });
        if (body.outer) {
          // Control: beside the OUTER nested transaction, which then rolls back.
          await db.insert(notes).values({ tag, what: 'audit' });
          tx.rollback();
        }
        await tx
          .transaction(async (gift) => {
            await gift.insert(notes).values({ tag, what: 'gift' });
            await db.insert(notes).values({ tag, what: 'audit' }); // beside, the service's db
            gift.rollback();
          })
          .catch(() => undefined);
      })
      .catch((error: unknown) => {
        if (!body.outer) throw error;
      });
    return { tag, placed: true };
  }
  if (body.layer === 'prisma') {
    await prisma
      .$transaction(async (tx) => {
        await note(tx, tag, 'outer');
        if (body.outer) {
          await note(prisma, tag, 'audit');
          throw new Error('the order was refused');
        }
        await (tx as PrismaTx)
          .$transaction(async (gift) => {
            await note(gift, tag, 'gift');
            await note(prisma, tag, 'audit'); // beside, the service's prisma
            throw new Error('no gift wrap today');
          })
          .catch(() => undefined);
      })
      .catch((error: unknown) => {
        if (!body.outer) throw error;
      });
    return { tag, placed: true };
  }
  const trx = await kdb.startTransaction().execute();
  await trx.insertInto('adv72_notes').values({ tag, what: 'outer' }).execute();
  if (body.outer) {
    await kdb.insertInto('adv72_notes').values({ tag, what: 'audit' }).execute();
    await trx
      .rollback()
      .execute()
      .catch(() => undefined);
    return { tag, placed: true };
  }
  const sp = await trx.savepoint('gift').execute();
  await sp.insertInto('adv72_notes').values({ tag, what: 'gift' }).execute();
  await kdb.insertInto('adv72_notes').values({ tag, what: 'audit' }).execute(); // beside
  const back = await sp.rollbackToSavepoint('gift').execute();
  await back.commit().execute();
  return { tag, placed: true };
}

@Controller()
class NotesController {
  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body72) {
    return work(body);
  }

  @Post('plain')
  plain(@Body() body: Body72) {
    return work(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
})
class NotesModule {}

describe('adversary 72: a write beside an inner savepoint of a data layer', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv72_inner_savepoint', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
        kdb = new Kysely<KyselyDb>({ dialect: new PostgresDialect({ pool: started }) });
        prisma = new PrismaClient({ adapter: new PrismaPg(started) });
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv72_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL, n int)',
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await prisma?.$disconnect();
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await fixture.admin.query<{ what: string }>(
        'SELECT what FROM adv72_notes WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body72) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it.each(['drizzle', 'kysely', 'prisma'] as const)(
    'control (%s): without @Idempotent() the audit beside the inner savepoint is kept',
    async (layer) => {
      const tag = `plain-${layer}`;
      const answer = await post('/plain', undefined, { tag, layer });
      expect(answer.status).toBe(201);
      expect(await kept(tag)).toEqual(['audit', 'outer']);
    },
    20_000,
  );

  it.each(['drizzle', 'kysely', 'prisma'] as const)(
    'control (%s): beside the OUTER nested transaction that rolls back, refused: 500, nothing kept',
    async (layer) => {
      const tag = `outer-${layer}`;
      const answer = await post('/keyed', tag, { tag, layer, outer: true });
      expect(answer.status).toBe(500);
      expect(await kept(tag)).toEqual([]);
    },
    20_000,
  );

  it.each(['drizzle', 'kysely', 'prisma'] as const)(
    '%s: beside an INNER savepoint that rolls back, the audit is kept (or the request refused), never a 201 without it',
    async (layer) => {
      const tag = `inner-${layer}`;
      const answer = await post('/keyed', tag, { tag, layer });
      const rows = await kept(tag);
      // Received: status 201, rows ['outer']: the awaited audit write rolled back in silence.
      const outcome =
        answer.status === 201 && !rows.includes('audit')
          ? `${answer.status} stored, notes ${JSON.stringify(rows)}: the audit row is gone`
          : 'audit kept or refused';
      expect(outcome).toBe('audit kept or refused');
      if (answer.status === 201) expect(rows).toEqual(['audit', 'outer']);
      else expect(rows).toEqual([]);
    },
    20_000,
  );
});
