/**
 * Adversary 72: the request's FIRST write sent at once with a nested transaction (`Promise.all`
 * of an audit insert on `db` and a `db.transaction()` that gives up on a business rule) is
 * rolled back with that nested transaction in silence: the handler's awaited insert resolved,
 * the request answers 201, the 201 is stored and replayed, and the audit row is not there.
 * Without the library the insert commits on a connection of its own. Once the request's
 * transaction is open (any write before), the same code keeps the audit (the control): the
 * loss depends only on whether the audit is the request's first write.
 *
 *   await Promise.all([
 *     db.insert(notes).values({ tag, what: 'audit' }),
 *     db.transaction(async (tx) => {
 *       await tx.insert(notes).values({ tag, what: 'reserved' });
 *       tx.rollback(); // out of stock
 *     }).catch(() => undefined),
 *   ]);
 *   return { tag };
 *
 * Why: `PoolTransaction.statement()` (lib/data-layers/pool-transaction.ts) marks the open
 * nested transactions a statement runs beside (`markBeside(from)`) BEFORE it awaits the
 * request's connection (`await this.connection()`, the pool's acquire for a first write). The
 * nested transaction's `BEGIN` is taken meanwhile (its savepoint pushed, unmarked); the audit
 * then makes that savepoint (`makeSavepoints`) and runs inside it, and the nested
 * transaction's `ROLLBACK` finds `beside` unset, so `rollBack()` refuses nothing and the
 * audit goes with it. With the connection already there the statement reaches
 * `makeSavepoints` before the `BEGIN` is taken, and runs outside the savepoint.
 *
 * Expected (docs/guides/data-layers.md): "A statement sent beside an open nested transaction
 * ... runs inside it ... if it rolls back, it would take the statement along, where without
 * the library that statement commits on a connection of its own, so the rollback is refused
 * with `StatementBesideNestedTransactionError` and the whole request rolls back"; kysely.md:
 * "Parallel queries (`Promise.all` of selects and inserts) are fine". So: the audit kept with
 * the 201, or the request refused (500, nothing kept); never a stored 201 without it.
 *
 * Control: the same `Promise.all` after a first write (the request's transaction open): 201,
 * the audit kept.
 *
 * Severity: high (an awaited, successful write lost while the answer is stored and replayed;
 * no error anywhere).
 *
 * Fails now: 'Expected: "audit kept or refused", Received: "201 stored, rows []: the audit
 * row is gone"', for Drizzle, Kysely and Prisma (its interactive `$transaction`) alike
 * (the three controls pass).
 *
 * Fixed: a statement runs inside the nested transactions open when it was sent, not one
 * begun while it waited for the request's connection (`makeSavepoints(client, open)`), and is
 * marked beside those whose SAVEPOINT went before it as it is sent: the audit is kept.
 */
import { Body, Controller, Module, Post } from '@nestjs/common';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { pgTable, serial, text } from 'drizzle-orm/pg-core';
import { PrismaPg } from '@prisma/adapter-pg';
import { Kysely, PostgresDialect } from 'kysely';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { PrismaClient } from '../../../docs/snippets/prisma/src/generated/prisma/client.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const notes = pgTable('adv72f_notes', {
  id: serial('id').primaryKey(),
  tag: text('tag').notNull(),
  what: text('what').notNull(),
});

interface KyselyDb {
  adv72f_notes: { id?: number; tag: string; what: string };
}

let pool: Pool;
let db: NodePgDatabase;
let kdb: Kysely<KyselyDb>;
let prisma: PrismaClient;

type Body72 = { tag: string; layer: 'drizzle' | 'kysely' | 'prisma'; writeFirst: boolean };

const note = (client: { $executeRaw: PrismaClient['$executeRaw'] }, tag: string, what: string) =>
  client.$executeRaw`INSERT INTO adv72f_notes (tag, what) VALUES (${tag}, ${what})`;

async function handle(body: Body72) {
  const { tag } = body;
  if (body.writeFirst) await db.insert(notes).values({ tag, what: 'before' });
  if (body.layer === 'drizzle') {
    await Promise.all([
      db.insert(notes).values({ tag, what: 'audit' }),
      db
        .transaction(async (tx) => {
          await tx.insert(notes).values({ tag, what: 'reserved' });
          tx.rollback();
        })
        .catch(() => undefined),
    ]);
  } else if (body.layer === 'prisma') {
    await Promise.all([
      note(prisma, tag, 'audit'),
      prisma
        .$transaction(async (tx) => {
          await note(tx, tag, 'reserved');
          throw new Error('out of stock');
        })
        .catch(() => undefined),
    ]);
  } else {
    await Promise.all([
      kdb.insertInto('adv72f_notes').values({ tag, what: 'audit' }).execute(),
      kdb
        .transaction()
        .execute(async (trx) => {
          await trx.insertInto('adv72f_notes').values({ tag, what: 'reserved' }).execute();
          throw new Error('out of stock');
        })
        .catch(() => undefined),
    ]);
  }
  return { tag };
}

@Controller()
class NotesController {
  @Post('notes')
  @Idempotent()
  create(@Body() body: Body72) {
    return handle(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
})
class NotesModule {}

describe('adversary 72: a first write beside a nested transaction begun at once', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv72_first_write_beside', {
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
          'CREATE TABLE adv72f_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv72f_notes WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (key: string, body: Body72) =>
    request(fixture.app.getHttpServer()).post('/notes').set('Idempotency-Key', key).send(body);

  it.each(['drizzle', 'kysely', 'prisma'] as const)(
    'control (%s): after a first write, the audit beside the rolled-back transaction is kept',
    async (layer) => {
      const tag = `adv72f-${layer}-after`;
      const answer = await post(tag, { tag, layer, writeFirst: true });
      expect(answer.status).toBe(201);
      expect(await kept(tag)).toEqual(['audit', 'before']);
    },
    20_000,
  );

  it.each(['drizzle', 'kysely', 'prisma'] as const)(
    '%s: as the first write, the audit is kept (or the request refused), never a stored 201 without it',
    async (layer) => {
      const tag = `adv72f-${layer}-first`;
      const answer = await post(tag, { tag, layer, writeFirst: false });
      const rows = await kept(tag);
      const outcome =
        answer.status === 201 && !rows.includes('audit')
          ? `${answer.status} stored, rows ${JSON.stringify(rows)}: the audit row is gone`
          : 'audit kept or refused';
      // Received: '201 stored, rows []: the audit row is gone' (and replayed as such).
      expect(outcome).toBe('audit kept or refused');
      if (answer.status === 201) expect(rows).toEqual(['audit']);
      else expect(rows).toEqual([]);
    },
    20_000,
  );
});
