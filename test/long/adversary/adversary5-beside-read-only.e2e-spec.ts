import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary, round 5: a write beside a nested READ ONLY transaction, on the pool seam. Round 4
 * made `BEGIN READ ONLY` (Drizzle's accessMode, Kysely's setAccessMode) a savepoint that sends
 * `SET TRANSACTION READ ONLY`, and marks a 25006 met while such a savepoint is open as the
 * handler's own (`markReadOnlyByHandler`): stored and replayed, never a 503. But on the
 * request's one connection, a statement of another client (`pool.query()`: Drizzle's `db`
 * instead of `tx` inside the callback, an audit service) runs inside that savepoint too, in its
 * read-only mode. Without the library it runs on a connection of its own and commits: 201.
 * With it, PostgreSQL refuses the write (25006, "cannot execute INSERT in a read-only
 * transaction", which the handler's code never asked for), and the library stores the 500 as
 * the handler's for good: every retry replays it. The beside-refusal the library has for a
 * nested transaction that set its role (`StatementBesideNestedTransactionError`, a clear
 * refusal) does not cover a nested transaction that set its mode.
 */
let pool: Pool;
/** The name of the error the audit write met, if any. */
const met: string[] = [];

/** A report in a read-only transaction of its own; an audit row written beside it. */
async function reportWithAudit(slot: string) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN READ ONLY');
    const { rows } = await client.query<{ n: number }>('SELECT count(*)::int AS n FROM slots');
    // The audit, through the pool (not the report's client): its own connection without the
    // library.
    await pool.query('INSERT INTO audit (slot) VALUES ($1)', [slot]).catch((error: Error) => {
      met.push(`${error.name} ${(error as { code?: string }).code ?? ''}`.trim());
      throw error;
    });
    await client.query('COMMIT');
    return { slot, n: rows[0].n >= 0 };
  } finally {
    await client.query('ROLLBACK').catch(() => undefined);
    client.release();
  }
}

@Controller()
class ReportController {
  @Post('report')
  @Idempotent()
  report(@Body() body: { slot: string }) {
    return reportWithAudit(body.slot);
  }

  @Post('plain/report')
  plainReport(@Body() body: { slot: string }) {
    return reportWithAudit(body.slot);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ReportController],
})
class ReportModule {}

describe('adversary 5: a write beside a nested READ ONLY transaction, on the pool', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv5_beside_read_only');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
    await admin.query('CREATE TABLE audit (slot text NOT NULL)');
    pool = createTestPool({ connectionString: database.url, max: 2 });
    pool.on('error', () => undefined);
    app = await bootstrapTestApp(ReportModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await endTestPool(pool);
    await admin?.end();
    await database?.drop();
  });

  const post = (path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const audited = async (slot: string) =>
    (await admin.query('SELECT 1 FROM audit WHERE slot = $1', [slot])).rows.length;

  it('without the library: 201, the audit row kept (the control)', async () => {
    const plain = await post('/plain/report', 'p1', { slot: 'plain' });
    expect({ status: plain.status, audited: await audited('plain') }).toEqual({
      status: 201,
      audited: 1,
    });
  });

  it('with it: as without (201, kept once), or a clear refusal, never a 25006 stored for good', async () => {
    const first = await post('/report', 'report', { slot: 'report' });
    const retry = await post('/report', 'report', { slot: 'report' });
    const outcome = {
      status: first.status,
      retry: retry.status,
      audited: await audited('report'),
      met,
    };
    console.log(`observed: ${JSON.stringify(outcome)}`);
    const asWithout = outcome.status === 201 && outcome.retry === 201 && outcome.audited === 1;
    const refused = met.includes('StatementBesideNestedTransactionError');
    // Observed: 500 (the 25006, "error 25006", stored as the handler's), the retry 500
    // replayed, audited 0.
    expect({ ...outcome, acceptable: asWithout || refused }).toMatchObject({ acceptable: true });
  }, 30_000);
});
