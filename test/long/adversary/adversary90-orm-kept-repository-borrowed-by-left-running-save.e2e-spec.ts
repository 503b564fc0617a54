/**
 * Fixed (session of 2026-12-06 fourth): `runnerView` asks where a statement is sent from
 * (`elsewhere()`) before it uses the runner of its own that its transaction runs on past its
 * home's end: a statement sent from another open request's scope joins that request's
 * transaction, never the left-running save's.
 *
 * Adversary 90 (orm): a repository kept from one request (`this.repo ??=
 * tx.getRepository(Entry)`, the guide's own example of a kept repository, through
 * `IdempotentTransaction`), used at the same time by work its first request left running past
 * its committed end (a `save()` from a timer, which TypeORM wraps in a transaction of its
 * own) and by a later request. Past the end the save's transaction moves to a runner of its
 * own (`runnerView`'s `own`), and while it is open every use of the kept view, from any scope,
 * is that runner's (`const joined = own ? undefined : elsewhere?.()`): the later request's
 * `save()` finds a transaction open there (TypeORM then opens none) and writes into the
 * first request's left-running transaction, not its own. That request then fails with
 * `RetryLaterError` (503, "rolled back, nothing stored"), but its row commits with the other
 * work a moment later, and its retry writes it again: two rows for one key. (Had the
 * left-running save rolled back instead, the later request's row would be lost under its
 * stored 201.)
 *
 * User code:
 *
 *   @Injectable() class Ledger {
 *     private repo?: Repository<Entry>;
 *     constructor(private readonly tx: IdempotentTransaction) {}
 *     get entries() { return (this.repo ??= this.tx.getRepository(Entry)); }
 *   }
 *   @Post('a') @Idempotent() async a() {
 *     await this.ledger.entries.save({ tag: 'a-main' });
 *     setTimeout(() => void this.ledger.entries.save({ tag: 'a-late' }), 50); // an audit row
 *     return {};
 *   }
 *   @Post('b') @Idempotent() async b(@Body() body) {
 *     await this.ledger.entries.save({ tag: body.tag });
 *     await this.bank.confirm(body.tag);                    // RetryLaterError once
 *     return { tag: body.tag };
 *   }
 *   // an afterInsert subscriber that takes a moment (a webhook, a slow audit) keeps the
 *   // late save's transaction open while b runs.
 *
 * Code path: lib/data-layers/runner-view.ts `runnerView`'s `get`: `const joined = own ?
 * undefined : elsewhere?.()`: while the view has a transaction on a runner of its own
 * (`apart()` → lib/data-layers/lazy-transaction.ts `viewOf`'s `apart` → `runnerAfterEnd`),
 * the scope a statement is sent from is never asked (`placeOfView` not reached), so another
 * request's statements join that transaction.
 *
 * Docs quote: docs/guides/transactions.md: "a repository, manager or runner kept from one
 * request (`this.repo ??= tx.getRepository(Entity)`) joins the request it is used in later or
 * at the same time"; the table: `RetryLaterError` "rolled back, nothing stored, lease released
 * | runs it once".
 *
 * Severity: high (an effect twice for one key; or, the left-running transaction rolled back,
 * a write lost under a stored 201; silent).
 *
 * Fails now (verified unskipped, twice): b's rows ['u1', 'u1'] (expected ['u1']), statuses
 * [201, 503, 201]. The same with a kept query runner (`this.qr ??=
 * dataSource.createQueryRunner()` in a, its late work `startTransaction()` … `commit`, b's
 * `this.qr.manager.insert`): b's statements ran on the late transaction's backend (same
 * `pg_backend_pid()`, its xid), two rows (verified, not kept as a file). Held: when the kept
 * repository's home is an earlier request and the late save runs in a later one's ended
 * scope (`after-its-end`), b's save joined b.
 * Control: the same two requests with b taking its repository per call
 * (`this.tx.getRepository(Entry)` each time): one row.
 *
 * Suggested fix: in `runnerView`, ask `elsewhere()` before `own`: a statement sent from
 * another open transaction's scope joins that one, whatever transaction the view runs past
 * its home's end; `own` is only for its home's scope (and no scope).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import {
  Column,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  type InsertEvent,
  PrimaryGeneratedColumn,
  type Repository,
} from 'typeorm';
import { Idempotent, IdempotentTransaction, RetryLaterError } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv90_kept_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The late audit row's subscriber takes a moment (a webhook call). */
@EventSubscriber()
class SlowAudit implements EntitySubscriberInterface<Entry> {
  listenTo() {
    return Entry;
  }

  async afterInsert(event: InsertEvent<Entry>) {
    if (event.entity.tag.endsWith('-late')) await sleep(800);
  }
}

const downOnce = new Set<string>();
function confirm(tag: string) {
  if (downOnce.delete(tag)) throw new RetryLaterError('the bank is down');
}

/** What the left-running saves met. */
const late: Promise<string>[] = [];

/** The service's kept repository (forgotten between the tests: each starts from its own a). */
const held: { repo?: Repository<Entry> } = {};

@Injectable()
class Ledger {
  constructor(private readonly tx: IdempotentTransaction) {}

  get kept() {
    return (held.repo ??= this.tx.getRepository(Entry));
  }

  get fresh() {
    return this.tx.getRepository(Entry);
  }
}

@Controller()
class LedgerController {
  constructor(private readonly ledger: Ledger) {}

  @Post('a')
  @Idempotent()
  async a(@Body() body: { tag: string }) {
    await this.ledger.kept.save({ tag: `${body.tag}-main` });
    late.push(
      new Promise((resolve) => {
        setTimeout(() => {
          this.ledger.kept.save({ tag: `${body.tag}-late` }).then(
            () => resolve('saved'),
            (error: unknown) => resolve((error as Error).name),
          );
        }, 50);
      }),
    );
    return { tag: body.tag };
  }

  @Post('b')
  @Idempotent()
  async b(@Body() body: { tag: string; repo: 'kept' | 'fresh' }) {
    await this.ledger[body.repo].save({ tag: body.tag });
    confirm(body.tag);
    return { tag: body.tag };
  }
}

describe('adversary 90 orm: a kept repository borrowed by a save left running past its request’s end', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv90_orm_kept_repo_left_running', {
      controllers: [LedgerController],
      providers: [Ledger],
      entities: [Entry],
      subscribers: [SlowAudit],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv90_kept_entries (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(repo: 'kept' | 'fresh', tag: string) {
    late.length = 0;
    held.repo = undefined;
    const a = await request(app.getHttpServer())
      .post('/a')
      .set('Idempotency-Key', `key-a-${tag}`)
      .send({ tag: `a-${tag}` });
    // The late save has begun (its subscriber takes 800 ms).
    await sleep(250);
    downOnce.add(tag);
    const post = () =>
      request(app.getHttpServer())
        .post('/b')
        .set('Idempotency-Key', `key-b-${tag}`)
        .send({ tag, repo });
    const failed = await post();
    const met = await Promise.all(late);
    const retried = await post();
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv90_kept_entries WHERE tag = $1 ORDER BY id',
      [tag],
    );
    return {
      statuses: [a.status, failed.status, retried.status],
      rows: rows.map((row) => row.tag),
      met,
    };
  }

  it('control: b takes its repository per call: its failed try rolled back, one row', async () => {
    expect(await scenario('fresh', 'c1')).toEqual({
      statuses: [201, 503, 201],
      rows: ['c1'],
      met: ['saved'],
    });
  }, 30_000);

  it('b uses the kept repository: its failed try rolled back too, one row', async () => {
    expect(await scenario('kept', 'u1')).toEqual({
      statuses: [201, 503, 201],
      rows: ['u1'],
      met: ['saved'],
    });
  }, 30_000);
});
