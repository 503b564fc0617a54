/**
 * Adversary 75d: on TypeORM, 75b's audit subscriber moved one event earlier: a
 * `beforeTransactionCommit` that starts a transaction of its own without awaiting it (an
 * audit row written on the side; the handler awaits the pending audits before it answers).
 * The audit's start runs at the same time as the commit that told of it: the commit's
 * `RELEASE SAVEPOINT typeorm_1` goes out between the audit's keep round trip and its
 * `SAVEPOINT typeorm_2`, the depths no longer match the savepoints' names, the handler's next
 * `dataSource.transaction()` takes `typeorm_2` as well, and the audit's commit (put off until
 * that one ended: `commitLater`, then `releaseCommitted`) sends `RELEASE SAVEPOINT typeorm_1`,
 * long gone (3B001): the library refuses, the request's transaction is aborted, 500
 * `transaction_aborted` stored and replayed; nothing committed, though every `await` of the
 * handler succeeded. Without the library: 201, the two rows and the audit row.
 *
 *   @EventSubscriber()
 *   class AuditSubscriber implements EntitySubscriberInterface {
 *     beforeTransactionCommit(event: TransactionCommitEvent) {
 *       audits.push(event.connection.transaction((m) => m.query('INSERT INTO … audit …')));
 *     }
 *   }
 *   await dataSource.transaction((m) => m.query('INSERT … a'));
 *   await dataSource.transaction((m) => m.query('INSERT … b'));
 *   await Promise.all(audits);                 // every audit written before answering
 *
 * Why: `TurnQueue.run` (lib/data-layers/turn-queue.ts, commit c2967e9) runs work asked from
 * inside a turn that is `underWay` at once, beside the rest of that turn, not after it. From
 * `afterTransactionCommit` (75b's case) the rest of the commit turn sends nothing; from
 * `beforeTransactionCommit` the rest is the commit itself: `commitFrom` → `asOwner` →
 * TypeORM's `commitTransaction`, which sends the `RELEASE SAVEPOINT` and lowers
 * `transactionDepth` right after the subscribers return, while the audit's `startNow` (its
 * beside keep round trip, `keepState(besideName(3))`, then TypeORM's `SAVEPOINT
 * typeorm_${transactionDepth}`) is under way. Seen on the wire: SAVEPOINT typeorm_1, INSERT a,
 * keep beside_3, RELEASE typeorm_1, SAVEPOINT typeorm_2 (the audit's), keep beside_3, INSERT
 * audit, SAVEPOINT typeorm_2 (the handler's b, again), INSERT b, RELEASE typeorm_2, RELEASE
 * typeorm_1 (the audit's put-off commit: `savepoint "typeorm_1" does not exist`), ROLLBACK.
 *
 * Expected (docs/guides/transactions.md, two nested transactions at once): "their starts,
 * commits and rollbacks run one at a time, in the order asked. One a subscriber starts from a
 * commit it is told of (`afterTransactionCommit`), awaited or not, runs within that commit's
 * turn, and the next waits for it." A `beforeTransactionCommit` subscriber is told of the
 * same commit; no limit is stated for it, and the code commits without the library.
 *
 * Control: the same route without `@Idempotent()` (201, the rows and the audit), and the same
 * keyed route with the subscriber awaiting its transaction (201, the rows and the audit).
 *
 * Severity: medium (a false refusal of correct code, deterministic here, its 500 stored and
 * replayed to every retry; nothing committed).
 *
 * Fails now: `expect(`${status} ${handler's error}`).toBe('201 ')`: Received: "500 " (500
 * `transaction_aborted`, no error met by the handler: the audit's put-off commit failed with
 * `savepoint "typeorm_1" does not exist` at its release); the retry replays the 500. The two
 * controls pass.
 *
 * Suggested fix: work asked from inside a turn that is not awaited by it must not run beside
 * the turn's own remaining statements: run it at once only while the turn is blocked on it
 * (awaited), or hold it until the turn's own work (the RELEASE) is done, then run it before
 * the next turn; or put off a start asked from a `beforeTransactionCommit` until after that
 * commit's RELEASE, as TypeORM's depth-named savepoints require.
 *
 * Fixed: a start asked by a `beforeTransactionCommit` subscriber waits for that commit's RELEASE
 * when the subscribers return without awaiting it, and runs at once when they are still waiting a
 * tick later (awaited): `CommitHold` (lib/data-layers/commit-hold.ts), made in `asOwner`'s
 * broadcaster and awaited in `startFrom` (lib/data-layers/lazy-transaction.ts).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import {
  DataSource,
  type EntityManager,
  type EntitySubscriberInterface,
  EventSubscriber,
  type TransactionCommitEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body75d = { tag: string; awaited?: boolean };

/** The audit asked for by the next commit (set by the handler), and the audits under way. */
let audit: { tag: string; awaited: boolean } | undefined;
const audits: Promise<unknown>[] = [];
/** What the handler met, by tag. */
const met = new Map<string, string>();

@EventSubscriber()
class AuditSubscriber implements EntitySubscriberInterface {
  async beforeTransactionCommit(event: TransactionCommitEvent) {
    if (!audit) return;
    const { tag, awaited } = audit;
    audit = undefined;
    const written = event.connection.transaction(async (manager: EntityManager) => {
      await manager.query(`INSERT INTO adv75d_rows (tag, what) VALUES ($1, 'audit')`, [tag]);
    });
    if (awaited) await written;
    else audits.push(written);
  }
}

@Injectable()
class AuditedService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private insert(manager: EntityManager, tag: string, what: string) {
    return manager.query(`INSERT INTO adv75d_rows (tag, what) VALUES ($1, $2)`, [tag, what]);
  }

  async run(body: Body75d) {
    try {
      await this.dataSource.transaction(async (manager: EntityManager) => {
        await this.insert(manager, body.tag, 'a');
        audit = { tag: body.tag, awaited: body.awaited ?? false };
      });
      await this.dataSource.transaction(async (manager: EntityManager) => {
        await this.insert(manager, body.tag, 'b');
      });
      await Promise.all(audits.splice(0));
    } catch (error) {
      met.set(body.tag, String(error));
      throw error;
    }
    return { tag: body.tag };
  }
}

@Controller()
class AuditedController {
  constructor(private readonly service: AuditedService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body75d) {
    return this.service.run(body);
  }

  @Post('plain')
  plain(@Body() body: Body75d) {
    return this.service.run(body);
  }
}

describe('adversary 75d: TypeORM, a subscriber transaction started in beforeTransactionCommit, not awaited', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75d_orm_before_commit_unawaited', {
      controllers: [AuditedController],
      providers: [AuditedService],
      subscribers: [AuditSubscriber],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv75d_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
        );
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await admin.query<{ what: string }>(
        'SELECT what FROM adv75d_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body75d) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(): 201, the two rows and the audit', async () => {
    expect((await post('/plain', undefined, { tag: 'p1' })).status).toBe(201);
    expect(await kept('p1')).toEqual(['a', 'audit', 'b']);
  }, 20_000);

  it('control: keyed, the subscriber awaits its transaction: 201, the rows', async () => {
    const body: Body75d = { tag: 'k0', awaited: true };
    const answer = await post('/keyed', 'k0', body);
    expect(`${answer.status} ${met.get('k0') ?? ''}`).toBe('201 ');
    expect(await kept('k0')).toEqual(['a', 'audit', 'b']);
  }, 20_000);

  it('keyed, the audit started and awaited by the handler later: 201, the rows', async () => {
    const body: Body75d = { tag: 'k1' };
    const answer = await post('/keyed', 'k1', body);
    const retry = await post('/keyed', 'k1', body);
    expect(retry.status).toBe(answer.status);
    expect(`${answer.status} ${met.get('k1') ?? ''}`).toBe('201 ');
    expect(await kept('k1')).toEqual(['a', 'audit', 'b']);
  }, 20_000);
});
