/**
 * Adversary 88 (orm): a service that looks its repository up once, through
 * `IdempotentTransaction` (the docs' way for services to "ask for the transaction by name"),
 * and keeps it (`this.entries ??= this.tx.getRepository(Entry)`), writes in every later
 * request through the first request's view of its runner. That request has ended, so each
 * later request's write runs apart, at once, in autocommit: it is not part of that request's
 * transaction. A later request whose handler then fails in a way the library gives the key
 * back for (`RetryLaterError`, a 503 `database_transient`) keeps its write, and the client's
 * retry writes it again: two ledger rows for one key.
 *
 * User code:
 *
 *   @Injectable() class LedgerService {
 *     private entries?: Repository<Entry>;
 *     constructor(private readonly tx: IdempotentTransaction) {}
 *     async record(tag: string) {
 *       this.entries ??= this.tx.getRepository(Entry);       // looked up once
 *       await this.entries.insert({ tag });
 *       await this.bank.confirm(tag);                         // throws RetryLaterError once
 *       return { tag };
 *     }
 *   }
 *
 * Code path: lib/idempotent-transaction.service.ts `manager` hands the request's
 * `sharedManager` (a view of the request's runner, lib/data-layers/lazy-transaction.ts
 * `viewOf`); a repository keeps that manager. In a later request its `insert` reaches the
 * first request's `queryFrom`, whose `this.ended` branch sends it apart
 * (`apart(…, () => this.readAlone(args))`, request-transaction.ts `afterEnd`: the first
 * request committed, so it runs), never asking which request's scope
 * (`transactionScope.getStore()`) the statement was sent from.
 *
 * Docs quote: docs/guides/data-layers.md, "Work queued across requests in the process": "The
 * request a statement belongs to is the one in whose async context it is sent"; README /
 * transactions.md: the handler's effects commit with its stored answer, "or not at all";
 * `RetryLaterError`: "503, Retry-After | rolled back, nothing stored, lease released | runs
 * it once".
 *
 * Severity: high (an effect twice for one key: the failed try's row committed on its own, the
 * retry's with the answer; nothing refused or logged).
 *
 * Fails now (verified unskipped): rows for the key ['b', 'b'] (expected ['b']); the first
 * try answered 503, the retry 201. Control: the same service looking the repository up on
 * each call (`this.tx.getRepository(Entry)` every time): ['b'] (the failed try's row rolled
 * back).
 *
 * Same root, seen in review (not a file of its own): a repository taken in the request
 * (`const attempts = this.tx.getRepository(Attempt)`) and used inside
 * `IdempotentTransaction.outside(() => attempts.insert(…))` writes in the request's
 * transaction, not apart: the handler's 503 (`RetryLaterError`) then rolls back the attempt
 * row `outside()` was meant to commit on its own (0 rows; 1 with the repository looked up
 * inside `outside()`). And adversary88-orm-memoized-repository-joins-open-request: the kept
 * repository while its request is still open writes in that request's transaction.
 *
 * Suggested fix: a statement through a view of an ended request's runner sent from another
 * live request's scope (`transactionScope.getStore()` is a different joinable transaction)
 * is that request's: route it to that request's transaction (join it), or refuse it clearly
 * (the request rolls back), naming the kept repository or manager; never run it apart.
 * Likewise a view's statement from no request scope at all after its request ended is work
 * left running, as now.
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
 * queued across requests"). The header's `outside()` variant is now a case of this file (with
 * its control).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, Entity, PrimaryGeneratedColumn, type Repository } from 'typeorm';
import { Idempotent, IdempotentTransaction, RetryLaterError } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv88_memo_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

/** The bank's confirmation: down once for each tag listed. */
const downOnce = new Set<string>();
function confirm(tag: string) {
  if (downOnce.delete(tag)) throw new RetryLaterError('the bank is down');
}

@Injectable()
class MemoLedger {
  private entries?: Repository<Entry>;
  constructor(private readonly tx: IdempotentTransaction) {}

  async record(tag: string) {
    this.entries ??= this.tx.getRepository(Entry);
    await this.entries.insert({ tag });
    confirm(tag);
    return { tag };
  }
}

@Injectable()
class FreshLedger {
  constructor(private readonly tx: IdempotentTransaction) {}

  async record(tag: string) {
    await this.tx.getRepository(Entry).insert({ tag });
    confirm(tag);
    return { tag };
  }
}

/**
 * The header's `outside()` variant: an attempt row meant to commit on its own, through a
 * repository taken in the request (`inside`) or inside `outside()` (the control).
 */
@Injectable()
class Attempts {
  constructor(private readonly tx: IdempotentTransaction) {}

  async record(tag: string, inside: boolean) {
    const kept = inside ? this.tx.getRepository(Entry) : undefined;
    await IdempotentTransaction.outside(() =>
      (kept ?? this.tx.getRepository(Entry)).insert({ tag: `${tag}-attempt` }),
    );
    confirm(tag);
    return { tag };
  }
}

@Controller()
class LedgerController {
  constructor(
    private readonly memo: MemoLedger,
    private readonly fresh: FreshLedger,
    private readonly attempts: Attempts,
  ) {}

  @Post('attempt-kept')
  @Idempotent()
  attemptKept(@Body() body: { tag: string }) {
    return this.attempts.record(body.tag, true);
  }

  @Post('attempt-fresh')
  @Idempotent()
  attemptFresh(@Body() body: { tag: string }) {
    return this.attempts.record(body.tag, false);
  }

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

describe('adversary 88 orm: a repository kept from an earlier request writes apart', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv88_orm_memo_repository', {
      controllers: [LedgerController],
      providers: [MemoLedger, FreshLedger, Attempts],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 4,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv88_memo_entries (id serial PRIMARY KEY, tag text NOT NULL)',
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
        .send({ tag: `${prefix}-${tag}` });
    // A first request: the service's repository is looked up (and, for `memo`, kept).
    const first = await post('a');
    // A later request whose bank confirmation is down once: 503, then the client retries.
    downOnce.add(`${prefix}-b`);
    const failed = await post('b');
    const retried = await post('b');
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv88_memo_entries WHERE tag = $1 ORDER BY id',
      [`${prefix}-b`],
    );
    return {
      statuses: [first.status, failed.status, retried.status],
      rows: rows.map((row) => row.tag),
    };
  }

  it('control: the repository looked up on each call: the failed try’s row rolled back, one row', async () => {
    expect(await scenario('fresh', 'c1')).toEqual({ statuses: [201, 503, 201], rows: ['c1-b'] });
  }, 30_000);

  async function attempt(route: 'attempt-kept' | 'attempt-fresh', tag: string) {
    downOnce.add(tag);
    const answer = await request(app.getHttpServer())
      .post(`/${route}`)
      .set('Idempotency-Key', `key-${tag}`)
      .send({ tag });
    const { rows } = await fixture.admin.query('SELECT 1 FROM adv88_memo_entries WHERE tag = $1', [
      `${tag}-attempt`,
    ]);
    return { status: answer.status, attempts: rows.length };
  }

  it('control: outside(), the repository looked up inside it: the attempt commits on its own', async () => {
    expect(await attempt('attempt-fresh', 'o1')).toEqual({ status: 503, attempts: 1 });
  }, 30_000);

  it('outside(), a repository taken in the request: the attempt commits on its own too (added by the fixer)', async () => {
    expect(await attempt('attempt-kept', 'o2')).toEqual({ status: 503, attempts: 1 });
  }, 30_000);

  it('a kept repository: the failed try’s row rolled back with it, one row for the key', async () => {
    expect(await scenario('memo', 'm1')).toEqual({ statuses: [201, 503, 201], rows: ['m1-b'] });
  }, 30_000);
});
