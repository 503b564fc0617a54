/**
 * Adversary 75b: on TypeORM, a subscriber's `afterTransactionCommit` that starts a transaction
 * of its own without awaiting it (an audit row written on the side; the handler awaits the
 * pending audits before it answers), then the handler's next `dataSource.transaction()`: the
 * two start at once on the one connection, take the same savepoint name, and the audit's
 * COMMIT fails with `savepoint "typeorm_2" does not exist` (3B001). The request's
 * transaction is aborted, a bare 500 stored and replayed; nothing committed. Without the
 * library: 201, the two rows and the audit row.
 *
 *   @EventSubscriber()
 *   class AuditSubscriber implements EntitySubscriberInterface {
 *     afterTransactionCommit(event: TransactionCommitEvent) {
 *       audits.push(event.connection.transaction((m) => m.query('INSERT INTO … audit …')));
 *     }
 *   }
 *   await dataSource.transaction((m) => m.query('INSERT … a'));
 *   await dataSource.transaction((m) => m.query('INSERT … b'));
 *   await Promise.all(audits);                 // every audit written before answering
 *
 * Why: `LazyTransaction.inTurn` (lib/data-layers/lazy-transaction.ts, commit 214a1fb) runs a
 * start "asked by what runs inside the turn under way" at once, told by an AsyncLocalStorage
 * store set for the turn. The audit's `startTransaction()` is asked from the subscriber, inside
 * the first transaction's commit turn, so it skips the queue, but it is not awaited by that
 * turn: the turn ends, and the handler's second `dataSource.transaction()` start (queued, its
 * turn begins at once) runs at the same time as the audit's (`startNow` of both: the beside
 * keep round trip, then TypeORM's `SAVEPOINT typeorm_${transactionDepth}`), which is the very
 * race the queue exists to prevent ("TypeORM names a savepoint by the depth it starts at").
 * The AsyncLocalStorage store also follows the audit's later commit, but the turn is over
 * then, so nothing of it waits correctly either way.
 *
 * Expected (docs/guides/transactions.md, two nested transactions at once): "their savepoints
 * are one stack, and their starts, commits and rollbacks run one at a time, in the order
 * asked". Here two starts ran at once and the correct program, which commits without the
 * library, fails.
 *
 * Control: the same route without `@Idempotent()` (201, the rows), and the same keyed route
 * with the subscriber awaiting its transaction (the case 214a1fb made run inside the turn):
 * 201, the rows.
 *
 * Severity: medium (a false refusal of correct code, deterministic here, its 500 stored and
 * replayed to every retry; nothing committed).
 *
 * Fails now: `expect(`${status} ${handler's error}`).toBe('201 ')`: Received:
 * "500 QueryFailedError: savepoint \"typeorm_2\" does not exist"; the retry replays the 500.
 * The two controls pass.
 *
 * Suggested fix: a start, commit or rollback asked from inside a turn should skip the queue
 * only while that turn is still awaiting its subscribers (the window the fix was for): end the
 * "inside" window when the broadcast it was opened for returns (clear a flag on the token
 * then, so later asks under the same AsyncLocalStorage store queue as any other), and put
 * such late work at the head of the queue rather than running it beside the next turn.
 *
 * Fixed: `LazyTransaction.inTurn` runs on a `TurnQueue` (lib/data-layers/turn-queue.ts): work
 * asked from inside a turn runs at once only while that turn still runs, and the turn lasts
 * until such work is done, awaited or not (the next start waits for the subscriber's); once
 * nothing of the turn runs, later asks of its asynchronous descendants queue as any other.
 *
 * Changed (fixer, round 80): `afterTransactionCommit` of the request's nested commits is told
 * once the request's COMMIT succeeded (lib/data-layers/after-request-commit.ts; adversary80b-orm-
 * outbox-relay-before-commit): the subscriber starts its audit then, past the handler, which
 * has none to await; the audit runs on a connection of its own and commits apart. The keyed
 * case checks the answer (201, the retry the same), then awaits the audit started after it.
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
  async afterTransactionCommit(event: TransactionCommitEvent) {
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

describe("adversary 75b: TypeORM, a subscriber's transaction started in afterTransactionCommit, not awaited", () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75b_orm_subscriber_unawaited', {
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
    // Changed (fixer): started once the request committed, after the handler.
    await Promise.all(audits.splice(0));
    expect(await kept('k1')).toEqual(['a', 'audit', 'b']);
  }, 20_000);
});
