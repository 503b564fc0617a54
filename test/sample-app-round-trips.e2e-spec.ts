import { type INestApplication } from '@nestjs/common';
import pg from 'pg';
import request from 'supertest';
import { MIGRATIONS } from '../sample-app/app.module.js';
import { createSampleApp } from '../sample-app/create-app.js';
import { migrate } from '../sample-app/database/migrate.js';
import { type FakePsp, startFakePsp } from '../sample-app/psp/fake-psp.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

/**
 * The round trips to PostgreSQL of one new charge (`POST /charges`), counted at the pg client
 * of the sample app in this process: the claim with the charge's row, committed with its
 * recovery point in one transaction (`oneCommit`), and the PSP's answer committed with the charge's status and the stored response
 * (the design's step 5: the last phase stores the response in its transaction). A round trip
 * added to a charge fails here.
 */
describe('a new charge’s round trips to PostgreSQL', () => {
  let database: TestDatabase;
  let psp: FakePsp;
  let app: INestApplication;
  let statements: string[] = [];
  let commits = 0;
  const originalQuery = pg.Client.prototype.query;

  beforeAll(async () => {
    database = await createTestDatabase('charge_round_trips');
    await migrate({ type: 'postgres', url: database.url, migrations: MIGRATIONS });
    psp = await startFakePsp();
    app = await createSampleApp(
      {
        databaseUrl: database.url,
        pspUrl: psp.url,
        pspTimeoutMs: 5000,
        leaseMs: 60_000,
        retentionMs: 86_400_000,
        purgeIntervalMs: 3_600_000,
        transferDelayMs: 0,
        requestTimeoutMs: 0,
      },
      'express',
      false,
    );
    await app.init();
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      const config = args[0] as string | { text?: string; name?: string; begin?: string };
      const text = typeof config === 'string' ? config : (config.text ?? '');
      const name = typeof config === 'string' ? '' : (config.name ?? '');
      const begin = typeof config === 'string' ? undefined : config.begin;
      statements.push(begin ? `${begin}; ${text}` : text);
      if (name.endsWith('_commit') || /^COMMIT/i.test(text)) commits++;
      return (originalQuery as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof pg.Client.prototype.query;
  });
  afterAll(async () => {
    pg.Client.prototype.query = originalQuery;
    await app?.close();
    await psp?.close();
    await database?.drop();
  });

  const charge = (key: string, customer: string) =>
    request(app.getHttpServer())
      .post('/charges')
      .set('Idempotency-Key', key)
      .set('X-Tenant-Id', '1')
      .send({ amount: 100, currency: 'eur', customer });

  it('costs five round trips and two commits, its answer unchanged', async () => {
    await charge('warm-up', 'cus_warm'); // the pool's connections and statements, outside the count
    statements = [];
    commits = 0;
    const created = await charge('round-trips', 'cus_rt');
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      amount: 100,
      currency: 'eur',
      customer: 'cus_rt',
      status: 'succeeded',
    });
    expect(created.body.psp_authorization).toEqual(expect.any(String));
    expect(statements).toHaveLength(5);
    // The claim opens the transaction (its BEGIN in the same round trip, `oneCommit`)...
    expect(statements[0]).toMatch(/^BEGIN ISOLATION LEVEL READ COMMITTED; .*idempotency_claim/s);
    // ...and commits with the charge's row and its recovery point.
    expect(statements[1]).toMatch(/^INSERT INTO "charges"/);
    expect(statements[2]).toContain('SET recovery_point');
    expect(statements[3]).toMatch(
      /^BEGIN ISOLATION LEVEL READ COMMITTED; UPDATE charges SET status = \$1, psp_authorization/,
    );
    expect(statements[4]).toContain("SET state = 'done'");
    expect(commits).toBe(2); // the claim with the charge's phase, then the answer
    expect(psp.authorizations()).toHaveLength(2);
  });
});
