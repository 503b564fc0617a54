import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../lib/index.js';
import { bootstrapTestApp } from '../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { createTestPool, endTestPool } from '../support/test-pool.js';

/**
 * A database whose `default_transaction_isolation` is serializable (which the pool seam
 * honours for the requests' transactions). The library's claim runs in autocommit, so at that
 * level too. Two workers (two apps, each with its own claim batcher) get one key at the same
 * moment: the loser's `INSERT … ON CONFLICT DO NOTHING` meets the winner's row, committed
 * after its snapshot, and PostgreSQL refuses it with a serialization failure (40001), where
 * read committed does nothing. Found by an adversarial review (issue 27): 503 store_unavailable
 * in 7 of 12 rounds. Now the claim runs again and reads the winning row: 409 key_in_progress,
 * or, when the loser's insert waited for the winner's request to commit (a row lock its
 * SERIALIZABLE transaction holds from its BEGIN), the winner's answer replayed.
 */
const ROUNDS = 12;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function appModule(pool: Pool) {
  @Controller()
  class RaceController {
    @Post('book')
    @Idempotent()
    async book(@Body() body: { slot: string }) {
      await pool.query(`INSERT INTO slots (slot, who) VALUES ($1, 'b')`, [body.slot]);
      await sleep(300);
      return { slot: body.slot };
    }
  }
  @Module({
    imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
    controllers: [RaceController],
  })
  class RaceModule {}
  return RaceModule;
}

describe.each([['serializable', true]])(
  'one key raced by two workers, database default %s',
  (_level, serializable) => {
    let database: TestDatabase;
    let admin: Client;
    const pools: Pool[] = [];
    const apps: INestApplication[] = [];

    beforeAll(async () => {
      database = await createTestDatabase('adv_serializable_claims');
      admin = new Client({ connectionString: database.url });
      await admin.connect();
      await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
      await admin.query(
        'CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL, who text NOT NULL)',
      );
      if (serializable) {
        await admin.query(
          `ALTER DATABASE ${database.name} SET default_transaction_isolation = 'serializable'`,
        );
      }
      for (let i = 0; i < 2; i++) {
        const pool = createTestPool({ connectionString: database.url, max: 4 });
        pools.push(pool);
        apps.push(await bootstrapTestApp(appModule(pool), 'express'));
      }
    });

    afterAll(async () => {
      for (const app of apps) await app.close();
      for (const pool of pools) await endTestPool(pool);
      await admin?.end();
      await database?.drop();
    });

    it(`${ROUNDS} rounds of one key sent to both workers at once: each round one 201, then 409 key_in_progress or its replay, never a 503; one row`, async () => {
      const outcomes: string[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const slot = `race-${serializable}-${round}`;
        const answers = await Promise.all(
          apps.map((app) =>
            request(app.getHttpServer()).post('/book').set('Idempotency-Key', slot).send({ slot }),
          ),
        );
        outcomes.push(
          answers
            .map((answer) =>
              `${answer.status} ${(answer.body as { code?: string }).code ?? (answer.headers['idempotent-replayed'] ? 'replayed' : '')}`.trim(),
            )
            .sort()
            .join(', '),
        );
        const { rows } = await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot]);
        expect(rows).toHaveLength(1);
      }
      const promised = ['201, 409 key_in_progress', '201, 201 replayed'];
      expect(outcomes.filter((outcome) => !promised.includes(outcome))).toEqual([]);
    }, 60_000);
  },
);
