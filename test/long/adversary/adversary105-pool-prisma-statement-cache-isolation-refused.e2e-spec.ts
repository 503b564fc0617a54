/**
 * Fixed (session of 2026-12-07): same root as adversary105-pool-named-read-before-phase-refused,
 * confirmed: the named Prisma read began the request's transaction at READ COMMITTED.
 * lib/connection/prefixed-query.ts `apartStatement` drops the name of a plain read run apart
 * (lib/data-layers/pool-transaction.ts `readApart`), so the read runs apart and the `$transaction`
 * begins SERIALIZABLE.
 *
 * Adversary 105 (pool): with Prisma's statement cache (`new PrismaPg(pool, {
 * statementNameGenerator })`), a model read before `$transaction(fn, { isolationLevel:
 * 'Serializable' })` begins the request's transaction at READ COMMITTED, and the `$transaction`
 * is refused (`IsolationLevelRefusedError`, 500). The same read without the cache runs apart
 * and the request's transaction begins SERIALIZABLE.
 *
 * User code:
 *   const prisma = new PrismaClient({ adapter: new PrismaPg(pool, {
 *     statementNameGenerator: (query) => `p_${sha1(query.sql)}` }) });   // Prisma's cache
 *   @Post() @Idempotent()
 *   async book(@Body() { shift }) {
 *     const before = await prisma.doctor.count({ where: { shift: 'night' } });
 *     return prisma.$transaction(async (tx) => { await tx.doctor.create(…); … },
 *       { isolationLevel: 'Serializable' });
 *   }
 *
 * Code path: lib/data-layers/pool-join.ts `joiningQuery` -> lib/data-layers/pool-transaction.ts
 * `statement` -> `readApart` -> lib/connection/prefixed-query.ts `queryStatement` (undefined for
 * a config with a `name`): every Prisma read is named, none runs apart, the first begins the
 * request's transaction; lib/transaction/request-transaction.ts `askIsolation` then refuses the
 * level (the read touched the transaction, so the claim is not committed alone to begin anew).
 *
 * Docs quote: prisma.md: "A read before the handler's first write runs apart, as for TypeORM";
 * data-layers.md: "An isolation level asked for … asked before the first write, the request's
 * transaction begins at it; a stronger one after that is refused".
 *
 * Severity: medium (a false refusal: a 500 stored and replayed for working code; nothing
 * committed twice). Same root as adversary105-pool-named-read-before-phase-refused.
 *
 * Fails now: with the cache, 500 (`IsolationLevelRefusedError`: "the request's transaction
 * already began at READ COMMITTED"); without it (control), 201 at `serializable`.
 *
 * Controls: the same handler on a PrismaClient without `statementNameGenerator`.
 *
 * Suggested fix: run a named plain read apart too (without its name on the connection apart,
 * or behind its own `BEGIN READ ONLY`), or weigh a named read as a plain one when deciding
 * whether the request's transaction began.
 */
import { createHash } from 'node:crypto';
import { Body, Controller, HttpCode, Module, Param, Post } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { PrismaClient } from '../../examples/support/prisma-on-call/generated/client.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;
let plainPrisma: PrismaClient;
let cachedPrisma: PrismaClient;
const refusals: string[] = [];

@Controller('doctors')
class DoctorsController {
  @Post(':client')
  @HttpCode(201)
  @Idempotent()
  async book(@Param('client') which: string, @Body() { shift }: { shift: string }) {
    const prisma = which === 'cached' ? cachedPrisma : plainPrisma;
    const before = await prisma.doctor.count({ where: { shift: 'night' } });
    try {
      const level = await prisma.$transaction(
        async (tx) => {
          await tx.doctor.create({ data: { shift, name: 'a', onCall: true } });
          const [{ level: inside }] = await tx.$queryRawUnsafe<{ level: string }[]>(
            `SELECT current_setting('transaction_isolation') AS level`,
          );
          return inside;
        },
        { isolationLevel: 'Serializable' },
      );
      return { before, level };
    } catch (error) {
      refusals.push(`${which}: ${(error as Error).constructor.name}`);
      throw error;
    }
  }
}

describe('adversary 105 pool: a Prisma read with the statement cache makes a Serializable $transaction refused', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [DoctorsController],
    })
    class DoctorsModule {}
    fixture = await startPoolApp('adv105_pool_prisma_cache_isolation', {
      module: DoctorsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        plainPrisma = new PrismaClient({ adapter: new PrismaPg(started) });
        const statementNameGenerator = (query: { sql: string }) =>
          `p_${createHash('sha1').update(query.sql).digest('hex').slice(0, 16)}`;
        cachedPrisma = new PrismaClient({
          adapter: new PrismaPg(started, { statementNameGenerator }),
        });
      },
      setup: async (owner) => {
        await owner.query(
          `CREATE TABLE doctors (id serial PRIMARY KEY, shift text NOT NULL, name text NOT NULL, on_call boolean NOT NULL)`,
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await plainPrisma?.$disconnect();
    await cachedPrisma?.$disconnect();
    await fixture?.close();
  });

  async function bookTwice(which: string) {
    const post = async () => {
      const answer = await request(fixture.app.getHttpServer())
        .post(`/doctors/${which}`)
        .set('Idempotency-Key', `key-${which}`)
        .send({ shift: which })
        .timeout(20_000);
      const body = answer.body as { level?: string };
      return `${answer.status} ${body.level ?? ''}`.trim();
    };
    const first = await post();
    const retried = await post();
    const { rows } = await fixture.admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM doctors WHERE shift = $1`,
      [which],
    );
    return { first, retried, rows: rows[0].n };
  }

  it('control: without the statement cache the read runs apart and the transaction is SERIALIZABLE', async () => {
    expect(await bookTwice('plain')).toEqual({
      first: '201 serializable',
      retried: '201 serializable',
      rows: 1,
    });
  }, 60_000);

  it('with the statement cache the read still runs apart and the transaction is SERIALIZABLE', async () => {
    expect({ ...(await bookTwice('cached')), refusals }).toEqual({
      first: '201 serializable',
      retried: '201 serializable',
      rows: 1,
      refusals: [],
    });
  }, 60_000);
});
