/**
 * Adversary 88 (orm): a repository taken in the request (`IdempotentTransaction.getRepository`)
 * and used after the answer to stream rows (a follow-up export the handler starts and does
 * not await) is refused with `TransactionEndedError`, whose message says "The idempotent
 * request’s transaction was rolled back", though the request committed and its 201 is
 * stored. The same repository's plain `find()` at that moment runs on its own, as the guide
 * says work left running does; without the library the stream runs too.
 *
 * User code:
 *
 *   async place(tag) {
 *     const orders = this.tx.getRepository(Order);
 *     await orders.insert({ tag });
 *     // fire and forget: push the tenant's orders to the warehouse feed
 *     void sleep(100).then(async () => {
 *       const rows = await orders.createQueryBuilder('o').where('o.tag = :tag', { tag }).stream();
 *       for await (const row of rows) feed.push(row);
 *     });
 *     return { tag };
 *   }
 *
 * Code path: lib/data-layers/lazy-transaction.ts `streamFrom`: `if (this.ended) throw new
 * TransactionEndedError()` (no argument: the "rolled back" message) whatever the outcome,
 * where `queryFrom`'s first line sends a statement after the end apart once the request
 * committed (`apart` → request-transaction.ts `afterEnd`); the same in request-transaction.ts
 * `sendNow` for a submittable after the end.
 *
 * Docs quote: docs/guides/transactions.md, "Database work belongs before the answer": "Once
 * the answer has committed, such work runs on its own, as it would without the library";
 * "If the request rolled back instead (a 503, a lost lease), it meets `TransactionEndedError`"
 * (so the error says the request rolled back).
 *
 * Severity: medium (a misleading error: the app is told the request rolled back when its 201
 * committed, and may compensate for work that is kept; the stream, a read, never runs where it
 * does without the library; nothing committed twice).
 *
 * Fails now (verified unskipped): the stream's outcome is "TransactionEndedError: The
 * idempotent request’s transaction was rolled back: …" (expected 1 row streamed) while the
 * answer is 201 and the order row committed. Controls pass: without `@Idempotent()` (1 row
 * streamed), and keyed with the repository looked up again after the answer (1 row).
 *
 * Suggested fix: in `streamFrom` (and `sendNow`'s submittable path) after the end, wait for
 * the outcome as `apart` does: once committed, stream on a runner of its own (as
 * `runnerAfterEnd` does for a transaction), refuse only after a rollback; and in any refusal
 * after a commit, say so (`TransactionEndedError(committed)` names the case).
 *
 * Fixed (session of 2026-12-06, third): `streamFrom` past the end goes through `apart` as
 * `queryFrom` does: once the request committed, the stream runs on a runner of its own
 * (`streamAlone`, its connection given back once node-postgres is through with the stream:
 * `endOf`), refused only after a rollback (or inside a nested transaction the end cut short,
 * with the 'committed' message); lib/data-layers/lazy-transaction.ts. The pool seam's
 * submittable past the end (request-transaction.ts `sendNow`) now does the same through
 * `sentAfterEnd`. docs/guides/data-layers.md says so.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent, IdempotentTransaction } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv88_stream_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let later: Promise<unknown> | undefined;

@Injectable()
class OrderService {
  constructor(private readonly tx: IdempotentTransaction) {}

  async place(tag: string, lookUpAgain: boolean) {
    const orders = this.tx.getRepository(Order);
    await orders.insert({ tag });
    later = sleep(100).then(async () => {
      const repository = lookUpAgain ? this.tx.getRepository(Order) : orders;
      const stream = await repository
        .createQueryBuilder('o')
        .where('o.tag = :tag', { tag })
        .stream();
      let streamed = 0;
      for await (const row of stream) if (row) streamed++;
      return streamed;
    });
    return { tag };
  }
}

@Controller()
class OrderController {
  constructor(private readonly orders: OrderService) {}

  @Post('plain')
  plain(@Body() body: { tag: string }) {
    return this.orders.place(body.tag, false);
  }

  @Post('idem')
  @Idempotent()
  idem(@Body() body: { tag: string }) {
    return this.orders.place(body.tag, false);
  }

  @Post('idem-again')
  @Idempotent()
  idemAgain(@Body() body: { tag: string }) {
    return this.orders.place(body.tag, true);
  }
}

describe('adversary 88 orm: a held repository’s stream after the answer committed', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv88_orm_held_stream', {
      controllers: [OrderController],
      providers: [OrderService],
      entities: [Order],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv88_stream_orders (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'plain' | 'idem' | 'idem-again', tag: string) {
    later = undefined;
    const answer = await request(app.getHttpServer())
      .post(`/${route}`)
      .set('Idempotency-Key', `key-${tag}`)
      .send({ tag });
    const streamed = await later!.then(
      (count) => count,
      (error: Error) => `${error.name}: ${error.message.slice(0, 60)}`,
    );
    const { rows } = await fixture.admin.query('SELECT 1 FROM adv88_stream_orders WHERE tag = $1', [
      tag,
    ]);
    return { status: answer.status, committed: rows.length, streamed };
  }

  it('control: without @Idempotent(), the follow-up stream reads the row', async () => {
    expect(await scenario('plain', 'c1')).toEqual({ status: 201, committed: 1, streamed: 1 });
  }, 30_000);

  it('control: keyed, the repository looked up again after the answer: the stream runs on its own', async () => {
    expect(await scenario('idem-again', 'c2')).toEqual({ status: 201, committed: 1, streamed: 1 });
  }, 30_000);

  it('keyed, the repository held from the request: the stream runs on its own once the answer committed', async () => {
    expect(await scenario('idem', 'i1')).toEqual({ status: 201, committed: 1, streamed: 1 });
  }, 30_000);
});
