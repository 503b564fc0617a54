/**
 * Fixed (session of 2026-12-07, third): the catalog query names the DEFAULT partition with
 * its schema (`quote_ident(nspname) || '.' || quote_ident(relname)`), and the remedy sets the
 * transaction's search path to the keys table's schema, so it runs from any session. The test
 * reads the remedy after "in one transaction: " (the message's new words). Un-skipped.
 *
 * Adversary 109 (read-through of 1c704b3..4414a50): the start-up refusal of a DEFAULT partition
 * names it by its bare table name, and the remedy it gives (`ALTER TABLE idempotency_keys
 * DETACH PARTITION <name>; DROP TABLE <name>`) fails where the partition is in a schema of its
 * own, off the search path (an operator keeping partitions apart: `CREATE TABLE
 * partitions.idempotency_keys_default PARTITION OF idempotency_keys DEFAULT`): `relation
 * "idempotency_keys_default" does not exist`. The operator is told what to run, runs it, and
 * the app still does not start.
 *
 * User code (an operator's):
 *   CREATE SCHEMA partitions;
 *   CREATE TABLE partitions.idempotency_keys_default PARTITION OF idempotency_keys DEFAULT;
 *   IdempotencyModule.forRoot({ partitionedExpiry: true, ... })  // refused; runs the remedy
 *
 * Code path: lib/schema/schema-check.ts SCHEMA_CATALOG_QUERY (`d.relname::text AS
 * "defaultPartition"`: no schema), `defaultPartitionProblem` (`sqlName(partition)`: the bare
 * name).
 *
 * Docs quote: the brief: "every misconfiguration fails at start-up with what to do";
 * docs/operations/partitioned-expiry.md "The app refuses to start with one (... Drop it: ALTER
 * TABLE idempotency_keys DETACH PARTITION idempotency_keys_default; DROP TABLE
 * idempotency_keys_default)".
 *
 * Severity: medium (the start-up message's remedy is a statement that fails).
 *
 * Fails now: (un-skipped) running the remedy the message gives rejects with `relation
 * "idempotency_keys_default" does not exist`.
 *
 * Controls: the same DEFAULT partition in the keys table's schema: the remedy runs and the
 * app starts.
 *
 * Suggested fix: read the partition as `pt.partdefid::regclass::text` (schema-qualified where
 * it is off the search path, quoted as needed) and print it as it is, not through `sqlName`.
 */
import { Controller, Logger, Module, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import {
  IdempotencyModule,
  Idempotent,
  PartitionIdempotencyKeys1764461600000,
} from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { describePartitioned } from '../../support/postgres-version.js';

if (!process.env.TEST_LOGS) Logger.overrideLogger(false);

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent()
  create() {
    return { ok: true };
  }
}

@Module({ controllers: [OrdersController] })
class OrdersModule {}

function appModuleOf(url: string) {
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, logging: false }),
      IdempotencyModule.forRoot({ globalKeys: true, partitionedExpiry: true }),
      OrdersModule,
    ],
  })
  class AppModule {}
  return AppModule;
}

async function sql(url: string, text: string): Promise<void> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}

/** The start-up refusal's message, or undefined where the app started. */
async function refusal(url: string): Promise<string | undefined> {
  try {
    const app = await bootstrapTestApp(appModuleOf(url));
    await app.close();
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

/** Refused for the DEFAULT partition; what running the message's remedy then does. */
async function followTheMessage(url: string): Promise<string> {
  const message = await refusal(url);
  expect(message).toContain('idempotency_keys has a DEFAULT partition');
  const remedy = /in one transaction: (.*)$/m.exec(message!)![1];
  const ran = await sql(url, remedy).then(
    () => 'ran',
    (error: unknown) => String(error),
  );
  return ran === 'ran'
    ? `ran; app ${(await refusal(url)) === undefined ? 'starts' : 'refused'}`
    : ran;
}

describePartitioned(
  'adversary 109 read-through: the DEFAULT partition remedy, another schema',
  () => {
    let database: MigratedDatabase | undefined;

    afterEach(async () => {
      await database?.drop();
      database = undefined;
    });

    it('control: a DEFAULT partition beside the keys table: the remedy runs, the app starts', async () => {
      database = await createMigratedDatabase('adv109_default_schema_control', [
        PartitionIdempotencyKeys1764461600000,
      ]);
      await sql(
        database.url,
        'CREATE TABLE idempotency_keys_default PARTITION OF idempotency_keys DEFAULT',
      );
      expect(await followTheMessage(database.url)).toBe('ran; app starts');
    }, 60_000);

    it('a DEFAULT partition in a schema of its own: the remedy runs, the app starts', async () => {
      database = await createMigratedDatabase('adv109_default_schema', [
        PartitionIdempotencyKeys1764461600000,
      ]);
      await sql(
        database.url,
        `CREATE SCHEMA partitions;
       CREATE TABLE partitions.idempotency_keys_default PARTITION OF idempotency_keys DEFAULT`,
      );
      expect(await followTheMessage(database.url)).toBe('ran; app starts');
    }, 60_000);
  },
);
