import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../lib/index.js';
import { startTypeormApp, type TypeormApp } from './support/typeorm-app.js';

/**
 * What a nested transaction's COMMIT ends, in PostgreSQL's order, on TypeORM as on the pool
 * seam (adversary round 12 found the order wrong on Drizzle; TypeORM's commit sent the same
 * text): a cursor left open over an `ON COMMIT` temporary table is closed before the table
 * is dropped or emptied (else 55006, "in use"), and a read-only nested transaction after a
 * write under a deferred foreign key runs no deferred check inside it (else 25006: the
 * check's row lock in a read-only transaction).
 */
type Batch = { batch: string; how: 'dropped' | 'emptied'; amounts: number[] };

@Controller()
class SettleController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async settle({ batch, how, amounts }: Batch) {
    const stage = how === 'dropped' ? 'pay_stage' : 'pay_stage_e';
    await this.dataSource.transaction(async (manager) => {
      await manager.query(
        how === 'dropped'
          ? 'CREATE TEMP TABLE pay_stage (amount int NOT NULL) ON COMMIT DROP'
          : 'CREATE TEMP TABLE IF NOT EXISTS pay_stage_e (amount int NOT NULL) ON COMMIT DELETE ROWS',
      );
      for (const amount of amounts) {
        await manager.query(`INSERT INTO ${stage} VALUES ($1)`, [amount]);
      }
      await manager.query(`DECLARE pay_cur CURSOR FOR SELECT amount FROM ${stage}`);
      for (;;) {
        const rows = (await manager.query('FETCH 2 FROM pay_cur')) as { amount: number }[];
        if (rows.length === 0) break;
        for (const { amount } of rows) {
          await manager.query('INSERT INTO ledger (batch, amount) VALUES ($1, $2)', [
            batch,
            amount,
          ]);
        }
      }
      // No CLOSE: the COMMIT closes the cursor.
    });
    // A line under a deferred foreign key (its check pending in the request's transaction),
    // then a summary read in a read-only transaction.
    await this.dataSource.query('INSERT INTO batches (id) VALUES ($1)', [batch]);
    await this.dataSource.query('INSERT INTO lines (batch) VALUES ($1)', [batch]);
    const total = await this.dataSource.transaction(async (manager) => {
      await manager.query('SET TRANSACTION READ ONLY');
      const [row] = (await manager.query(
        'SELECT sum(amount)::int AS total FROM ledger WHERE batch = $1',
        [batch],
      )) as { total: number }[];
      return row.total;
    });
    return { batch, total };
  }

  @Post('plain')
  plain(@Body() body: Batch) {
    return this.settle(body);
  }

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Batch) {
    return this.settle(body);
  }
}

describe('TypeORM: a nested COMMIT ends cursors before tables, and checks nothing read-only', () => {
  let fixture: TypeormApp;

  beforeAll(async () => {
    fixture = await startTypeormApp('typeorm_nested_commit_order', {
      controllers: [SettleController],
      setup: async (admin) => {
        await admin.query('CREATE TABLE ledger (batch text NOT NULL, amount int NOT NULL)');
        await admin.query('CREATE TABLE batches (id text PRIMARY KEY)');
        await admin.query(
          'CREATE TABLE lines (batch text NOT NULL REFERENCES batches DEFERRABLE INITIALLY DEFERRED)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  it.each<Batch['how']>(['dropped', 'emptied'])('a table %s', async (how) => {
    const body = { how, amounts: [3, 4, 5] };
    const plain = await request(fixture.app.getHttpServer())
      .post('/plain')
      .send({ ...body, batch: `plain-${how}` });
    expect({ status: plain.status, body: plain.body as unknown }).toEqual({
      status: 201,
      body: { batch: `plain-${how}`, total: 12 },
    });
    const answers = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const answer = await request(fixture.app.getHttpServer())
        .post('/keyed')
        .set('Idempotency-Key', `batch-${how}`)
        .send({ ...body, batch: how });
      answers.push({ status: answer.status, body: answer.body as unknown });
    }
    const { rows } = await fixture.admin.query(
      'SELECT count(*)::int AS n FROM ledger WHERE batch = $1',
      [how],
    );
    expect({ answers, ledger: rows[0].n as number }).toEqual({
      answers: [
        { status: 201, body: { batch: how, total: 12 } },
        { status: 201, body: { batch: how, total: 12 } },
      ],
      ledger: 3,
    });
  });
});
