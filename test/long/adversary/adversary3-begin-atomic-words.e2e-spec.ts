import {
  Body,
  Controller,
  type INestApplication,
  Module,
  Post,
  ServiceUnavailableException,
} from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * adversary3 (issue 27): sql-text.ts statementsOf counts `BEGIN ATOMIC` bodies by the two words
 * `begin atomic` in a row, wherever they stand, and splits no statement on `;` inside one. But
 * both are unreserved words, and `SELECT begin atomic FROM (SELECT 1 AS begin) s` (a column
 * named begin, labelled atomic) is a plain SELECT: every statement after it in the text is
 * then read as part of it, so a `COMMIT` (or `SET ROLE`, `DEALLOCATE ALL`) after it is not
 * refused. The COMMIT ends the request's transaction mid-handler: the handler's INSERT before
 * it is committed on its own. The handler then throws (a 503, stored by the default storeIf as
 * its answer 'alone', its effects rolled back): observed 503 stored and replayed, yet the
 * INSERT kept (1 row), an effect of a failed request. Expected: refused as a plain `COMMIT` is
 * (500 stored, nothing written). The same with a COMMIT the lexer takes for part of a string:
 * after `SET LOCAL standard_conforming_strings = off` (not refused; sent on its own), PostgreSQL reads
 * `'a\\''` as a string ending there, the lexer as one going on to the last quote.
 */
const LEASE_MS = 600;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let pool: Pool;
/** The refusals the handler met, as their messages. */
const refusals: string[] = [];

@Controller()
class SessionController {
  @Post('change')
  @Idempotent()
  async change(@Body() body: { slot: string; statement: string; fail?: boolean; before?: string }) {
    await pool.query(`INSERT INTO slots (slot) VALUES ($1)`, [body.slot]);
    try {
      // A statement of its own round trip (PostgreSQL reads a whole text before it runs any
      // of it). Either may be the one refused.
      if (body.before) await pool.query(body.before);
      await pool.query(body.statement);
    } catch (error) {
      refusals.push((error as Error).message);
      throw error;
    }
    // A passing failure after it: never stored, the retry runs the handler again.
    if (body.fail) throw new ServiceUnavailableException('try again');
    return { slot: body.slot };
  }

  /** A plain handler held past a few heartbeats of its lease: its transaction's level back. */
  @Post('slow')
  @Idempotent({ leaseMs: LEASE_MS })
  async slow(@Body() body: { slot: string }) {
    await pool.query(`INSERT INTO slots (slot) VALUES ($1)`, [body.slot]);
    await sleep(LEASE_MS * 2);
    const { rows } = await pool.query<{ level: string }>(
      `SELECT current_setting('transaction_isolation') AS level`,
    );
    return { slot: body.slot, level: rows[0].level };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [SessionController],
})
class SessionModule {}

describe('adversary3: a COMMIT hidden from sql-text.ts statementsOf', () => {
  let fixture: PoolApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startPoolApp('adv3_atomic', {
      module: SessionModule,
      // One connection: every request meets the connection the one before gave back.
      max: 1,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  const post = (path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const rows = async (slot: string) =>
    (await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot])).rows.length;

  it.each([
    ['atomic', '', 'SELECT begin atomic FROM (SELECT 1 AS begin) s; COMMIT'],
    // The lexer reads strings as standard_conforming_strings = on reads them; a handler may turn
    // it off for its transaction (SET LOCAL, not refused), and PostgreSQL then reads \\' as a quote.
    ['strings', 'SET LOCAL standard_conforming_strings = off', "SELECT 'a\\'' ; COMMIT; --'"],
  ])(
    'refuses a COMMIT hidden from the lexer (%s): nothing written',
    async (name, before, statement) => {
      const slot = `hidden-commit-${name}`;
      refusals.length = 0;
      const answers: number[] = [];
      for (let attempt = 0; attempt < 2; attempt++) {
        const answer = await post('/change', slot, { slot, statement, before, fail: true });
        answers.push(answer.status);
      }
      const { rows: stored } = await admin.query<{ code: number | null }>(
        'SELECT response_code AS code FROM idempotency_keys WHERE key = $1',
        [slot],
      );
      expect({
        answers,
        refusals: refusals.length,
        written: await rows(slot),
        stored: stored.map((row) => row.code),
      }).toEqual({
        // Refused before it is sent: a final 500, replayed.
        answers: [500, 500],
        refusals: 1,
        written: 0,
        stored: [500],
      });
    },
    30_000,
  );
});
