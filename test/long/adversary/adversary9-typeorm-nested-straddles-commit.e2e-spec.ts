import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 9: a `dataSource.transaction()` the handler starts and does not await (an
 * event listener's work) is committed HALF with the request's answer.
 *
 * What the user does: the handler records a transfer and hands its ledger posting to work it
 * does not await (an async event listener): `dataSource.transaction(async (m) => { debit;
 * (a rate lookup); credit })`, all or nothing, as TypeORM's docs promise. The handler answers
 * once the posting is under way.
 * What happens: the nested transaction is a savepoint of the request's transaction. The
 * request's COMMIT does not wait for it, nor refuse with it open: it commits the savepoint's
 * contents so far (the debit). The credit, sent after, meets `TransactionEndedError` ("committed
 * while a nested transaction … was open"), and the nested transaction's rollback cannot undo
 * the debit. The ledger keeps a debit without its credit, for ever, under a 201 that is replayed.
 * transactions.md says such work "joins the request's transaction while it is open. Once the
 * answer has committed, such work runs on its own, as it would without the library": neither
 * holds for a transaction that was open at the commit.
 * What should happen: the nested transaction all or nothing, as without the library (the same
 * handler on a plain route: debit and credit both kept): both rows, or neither (its writes
 * rolled back with a refusal of the request, or the commit waiting for it).
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Controller()
class TransfersController {
  /** What the posting work ended with, by tag. */
  static readonly postings = new Map<string, Promise<string>>();

  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async transfer(tag: string) {
    await this.dataSource.query('INSERT INTO transfers (tag) VALUES ($1)', [tag]);
    let debited!: () => void;
    const underWay = new Promise<void>((resolve) => (debited = resolve));
    // The posting, handed to an event listener (not awaited): both legs or neither.
    const posting = this.dataSource
      .transaction(async (manager) => {
        await manager.query("INSERT INTO ledger (tag, leg) VALUES ($1, 'debit')", [tag]);
        debited();
        await sleep(300); // the exchange rate, from another service
        await manager.query("INSERT INTO ledger (tag, leg) VALUES ($1, 'credit')", [tag]);
      })
      .then(
        () => 'posted',
        (error: unknown) => `failed: ${(error as Error).name}`,
      );
    TransfersController.postings.set(tag, posting);
    await underWay;
    return { transfer: tag };
  }

  @Post('transfers')
  @Idempotent()
  idempotent(@Body() body: { tag: string }) {
    return this.transfer(body.tag);
  }

  @Post('plain/transfers')
  plain(@Body() body: { tag: string }) {
    return this.transfer(body.tag);
  }
}

describe('adversary 9: TypeORM, a nested transaction left running across the commit', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv9_nested_straddles_commit', {
      controllers: [TransfersController],
      setup: async (admin) => {
        await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY, tag text NOT NULL)');
        await admin.query(
          'CREATE TABLE ledger (id serial PRIMARY KEY, tag text NOT NULL, leg text NOT NULL)',
        );
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  const legs = async (tag: string) =>
    (
      await admin.query<{ leg: string }>('SELECT leg FROM ledger WHERE tag = $1 ORDER BY leg', [
        tag,
      ])
    ).rows.map((row) => row.leg);

  const post = async (path: string, tag: string, key?: string) => {
    const req = request(app.getHttpServer()).post(path).timeout(6_000);
    const response = await (key ? req.set('Idempotency-Key', key) : req).send({ tag });
    await TransfersController.postings.get(tag);
    await sleep(100);
    return { status: response.status, legs: await legs(tag) };
  };

  it('without the library: 201, both legs posted (the control)', async () => {
    expect(await post('/plain/transfers', 'plain')).toEqual({
      status: 201,
      legs: ['credit', 'debit'],
    });
  });

  it('with it: the posting all or nothing (both legs, or none with a refusal)', async () => {
    const outcome = await post('/transfers', 'keyed', 'transfer-1');
    // Observed: { status: 201, legs: ['debit'] }: the credit met TransactionEndedError after
    // the request's COMMIT had committed the debit of the still-open nested transaction.
    expect([
      { status: 201, legs: ['credit', 'debit'] },
      { status: 500, legs: [] },
    ]).toContainEqual(outcome);
  });
});
