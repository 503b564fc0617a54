/**
 * Fixed (session of 2026-12-07, third): the refusal's remedy (lib/schema/schema-check.ts
 * `schemaRemedy`) offers schema.sql only for what schema.sql makes; for the partitioned layout
 * it says to run PartitionIdempotencyKeys1764461600000 and PinPartitionFunctions1764461800000
 * (now exported) once with a DataSource of their own, which the last test here follows on a
 * schema.sql database and sees the app start; docs/operations/partitioned-expiry.md says so.
 *
 * Adversary 109 (pool): an app on the pool seam whose tables come from `migrations/schema.sql`
 * (the documented set-up for Prisma, Drizzle and Kysely: docs/guides/data-layers.md, no
 * TypeORM) and which turns `partitionedExpiry` on is refused at start-up, rightly, but told to
 * "Run the library's migrations in the app's DataSource (...), or apply the package's
 * migrations/schema.sql with your own migration tool". The second remedy, the only one such an
 * app has, cannot work: schema.sql holds no partitioned layout (nor its functions), and applied
 * again it fails at once (`relation "idempotency_keys" already exists`); the app stays refused.
 * No doc says how to partition the table without TypeORM's QueryRunner (typeorm is an optional
 * peer dependency), and the message's 'see the README's "Partitioned expiry"' is only a link.
 *
 * User code (docs/guides/drizzle.md, docs/reference/options.md `partitionedExpiry`):
 *   psql "$DATABASE_URL" -f node_modules/nestjs-idempotency-pg/migrations/schema.sql
 *   IdempotencyModule.forRoot({ globalKeys: true, pool, partitionedExpiry: true })
 *
 * Code path: lib/schema/schema-check.ts `schemaMessage` (the schema.sql remedy added to every
 * problem but a grant or a DEFAULT partition, the partitioned layout's included: LAYOUT_NOT_PARTITIONED,
 * a function missing or unpinned), lib/claim/partitioned/layout-errors.ts LAYOUT_NOT_PARTITIONED.
 *
 * Docs quote: the brief: "every misconfiguration fails at start-up with what to do"; a message
 * "that says the wrong thing or no remedy" is a break.
 *
 * Severity: medium (a wrong remedy at start-up; nothing lost).
 *
 * Fails now: (un-skipped) the refusal names schema.sql as a remedy; applying it as said fails
 * (`relation "idempotency_keys" already exists`) and the app is refused again, as before.
 *
 * Controls: without `partitionedExpiry` the same app starts (schema.sql is complete for it).
 *
 * Suggested fix: for the partitioned layout's problems, say the one way (the
 * PartitionIdempotencyKeys1764461600000 and PinPartitionFunctions1764461800000 migrations, run
 * with a TypeORM DataSource once, e.g. `new DataSource({ type: 'postgres', url, migrations:
 * [...] }).runMigrations()`), or ship the layout as SQL (migrations/partitioned.sql) and name
 * it; never schema.sql.
 */
import { readFileSync } from 'node:fs';
import { Controller, Logger, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import { DataSource } from 'typeorm';
import {
  IdempotencyModule,
  Idempotent,
  PartitionIdempotencyKeys1764461600000,
  PinPartitionFunctions1764461800000,
} from '../../../lib/index.js';
import { startPoolApp } from '../../support/pool-app.js';

if (!process.env.TEST_LOGS) Logger.overrideLogger(false);

let pool: Pool;
let partitioned = false;

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent()
  place() {
    return { ok: true };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({
        globalKeys: true,
        pool,
        ...(partitioned ? { partitionedExpiry: true } : {}),
      }),
    }),
  ],
  controllers: [OrdersController],
})
class OrdersModule {}

const refusal = (error: unknown) => String((error as Error)?.message ?? error);

describe('adversary 109 pool: partitionedExpiry on schema.sql, the refusal names schema.sql', () => {
  it('control: without partitionedExpiry the app on schema.sql starts', async () => {
    partitioned = false;
    const fixture = await startPoolApp('adv109_pool_remedy_plain', {
      module: OrdersModule,
      usePool: (p) => (pool = p),
    });
    await fixture.close();
  }, 60_000);

  it('the remedy the refusal gives works when followed', async () => {
    partitioned = true;
    let message = '';
    // Refused at start-up (startPoolApp closes what it made and rethrows).
    const plain = await startPoolApp('adv109_pool_remedy_part', {
      module: OrdersModule,
      usePool: (p) => (pool = p),
    }).catch((error: unknown) => {
      message = refusal(error);
      return undefined;
    });
    expect(plain).toBeUndefined();
    expect(message).toMatch(/not partitioned/);
    // Followed as said, with "your own migration tool" (psql -f): refused at once, or, were it
    // to pass, the app would be refused again, as the layout is not in the file.
    const followed = message.includes('migrations/schema.sql')
      ? await startPoolApp('adv109_pool_remedy_followed', {
          module: OrdersModule,
          usePool: (p) => (pool = p),
          setup: (admin) =>
            admin.query(readFileSync('migrations/schema.sql', 'utf8')).then(() => undefined),
        }).then(
          async (fixture) => {
            await fixture.close();
            return 'started';
          },
          (error: unknown) => refusal(error),
        )
      : 'schema.sql not offered';
    // Observed: 'relation "idempotency_keys" already exists'.
    expect(['started', 'schema.sql not offered']).toContain(followed);
  }, 60_000);

  it('the remedy it gives instead works: the two migrations run once with a DataSource of their own', async () => {
    partitioned = true;
    const fixture = await startPoolApp('adv109_pool_remedy_once', {
      module: OrdersModule,
      usePool: (p) => (pool = p),
      // As the refusal says: on the schema.sql database, without the app's own TypeORM.
      setup: async (admin) => {
        const once = new DataSource({
          type: 'postgres',
          host: admin.host,
          port: admin.port,
          username: admin.user,
          password: admin.password ?? undefined,
          database: admin.database,
          migrations: [PartitionIdempotencyKeys1764461600000, PinPartitionFunctions1764461800000],
        });
        await once.initialize();
        try {
          await once.runMigrations();
        } finally {
          await once.destroy();
        }
      },
    });
    await fixture.close();
  }, 60_000);
});
