/**
 * Adversary 88 (orm): the same kept repository as
 * adversary88-orm-memoized-repository-commits-apart, while the request it was looked up in is
 * still open. Request B writes through request A's view of its runner, so B's row goes into
 * A's transaction: B answers 201 and stores it, then A fails (`RetryLaterError`: rolled back,
 * key given back) and takes B's row with it. B's retry replays the stored 201; its row never
 * exists.
 *
 * User code:
 *
 *   @Injectable() class LedgerService {
 *     private entries?: Repository<Entry>;
 *     constructor(private readonly tx: IdempotentTransaction) {}
 *     async record(tag: string) {
 *       this.entries ??= this.tx.getRepository(Entry);       // looked up once
 *       await this.entries.insert({ tag });
 *       await this.bank.confirm(tag);                         // slow for A, then down: 503
 *       return { tag };
 *     }
 *   }
 *
 * Code path: lib/idempotent-transaction.service.ts `manager` → the request's `sharedManager`
 * (a view of its runner, lib/data-layers/lazy-transaction.ts `viewOf`), kept in the
 * repository; B's `insert` reaches A's `queryFrom` (A not ended: sent on A's connection, in
 * A's transaction), never asking which request's scope (`transactionScope.getStore()`) it
 * was sent from; B's own transaction sees no statement and commits its answer alone.
 *
 * Docs quote: docs/guides/data-layers.md, "Work queued across requests in the process": "The
 * request a statement belongs to is the one in whose async context it is sent" (there the
 * library "cannot tell": here the statement is sent from B's context, which it can read);
 * docs/guides/transactions.md: the handler's writes "commit with the stored 201, or not at
 * all".
 *
 * Severity: high (a committed effect lost: B's 201 is stored and replayed while its row was
 * rolled back with another request; silent).
 *
 * Fails now (verified unskipped): statuses A 503, B 201, B's retry 201, rows for B [] (expected
 * ['m1-b']). Control: the repository looked up on each call: B's row kept, ['c1-b'].
 *
 * Suggested fix: as adversary88-orm-memoized-repository-commits-apart: a statement through a
 * view of request A sent from request B's scope is B's (join B's transaction) or is refused
 * clearly, B rolling back; never run in A's transaction.
 *
 * Fixed (session of 2026-12-06, third): a view of a request's runner asks, at each use, which
 * transaction scope it is used in (`transactionScope.getStore()`): in another open transaction's
 * of the same DataSource it hands everything to a view of that one's
 * (`JoinableTransaction.openRunner`, one per scope, from its first use there: its statements,
 * nested transactions, manager and `data`); in `outside()`, or with no scope while its own
 * request is open, it runs on its own now (each statement on a connection it gives back, a
 * transaction on a runner of its own); in another request's scope past that one's end, as that
 * request's left work; in its own request's scope as before. The decision is pure: lib/data-
 * layers/view-place.ts (`placeOfView`, table-driven spec); the redirect is runner-view.ts's
 * `elsewhere`; lazy-transaction.ts `openRunner`, `elsewhereNow`, `runnerApart`. Docs:
 * transactions.md ("How the handler's code reaches the transaction"), data-layers.md ("Work
 * queued across requests").
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, Entity, PrimaryGeneratedColumn, type Repository } from 'typeorm';
import { Idempotent, IdempotentTransaction, RetryLaterError } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv88_memo_open_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

/** The bank: slow for the tags held here until released, then down for them (503). */
const held = new Map<string, Promise<void>>();
async function confirm(tag: string) {
  const wait = held.get(tag);
  if (!wait) return;
  await wait;
  throw new RetryLaterError('the bank is down');
}

@Injectable()
class MemoLedger {
  private entries?: Repository<Entry>;
  constructor(private readonly tx: IdempotentTransaction) {}

  async record(tag: string) {
    this.entries ??= this.tx.getRepository(Entry);
    await this.entries.insert({ tag });
    await confirm(tag);
    return { tag };
  }
}

@Injectable()
class FreshLedger {
  constructor(private readonly tx: IdempotentTransaction) {}

  async record(tag: string) {
    await this.tx.getRepository(Entry).insert({ tag });
    await confirm(tag);
    return { tag };
  }
}

@Controller()
class LedgerController {
  constructor(
    private readonly memo: MemoLedger,
    private readonly fresh: FreshLedger,
  ) {}

  @Post('memo')
  @Idempotent()
  memoRecord(@Body() body: { tag: string }) {
    return this.memo.record(body.tag);
  }

  @Post('fresh')
  @Idempotent()
  freshRecord(@Body() body: { tag: string }) {
    return this.fresh.record(body.tag);
  }
}

describe('adversary 88 orm: a repository kept from a request still open writes in its transaction', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv88_orm_memo_open', {
      controllers: [LedgerController],
      providers: [MemoLedger, FreshLedger],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv88_memo_open_entries (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'memo' | 'fresh', prefix: string) {
    const post = (tag: string) =>
      request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${prefix}-${tag}`)
        .send({ tag: `${prefix}-${tag}` })
        .then((response) => response);
    let releaseA!: () => void;
    held.set(`${prefix}-a`, new Promise<void>((resolve) => (releaseA = resolve)));
    // A looks the repository up (and, for `memo`, keeps it), writes, and waits on the bank.
    const a = post('a');
    await new Promise((resolve) => setTimeout(resolve, 300));
    // B meanwhile: written and answered.
    const b = await post('b');
    // Then the bank fails A: 503, rolled back.
    releaseA();
    const answerA = await a;
    const retriedB = await post('b');
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv88_memo_open_entries WHERE tag = $1',
      [`${prefix}-b`],
    );
    return {
      statuses: [answerA.status, b.status, retriedB.status],
      rows: rows.map((row) => row.tag),
    };
  }

  it('control: the repository looked up on each call: B’s row is B’s own, kept', async () => {
    expect(await scenario('fresh', 'c1')).toEqual({ statuses: [503, 201, 201], rows: ['c1-b'] });
  }, 30_000);

  it('a kept repository: B’s row is B’s own, kept with its stored 201', async () => {
    expect(await scenario('memo', 'm1')).toEqual({ statuses: [503, 201, 201], rows: ['m1-b'] });
  }, 30_000);
});
