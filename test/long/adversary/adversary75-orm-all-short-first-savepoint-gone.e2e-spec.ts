/**
 * Adversary 75: on TypeORM, two `dataSource.transaction()` under `Promise.all` where the first
 * has nothing (or one read) to do: the first commits while the second is still being started,
 * and the second's COMMIT then fails with PostgreSQL's `savepoint "typeorm_1" does not exist`
 * (a `QueryFailedError`, 3B001). The request answers Nest's bare 500 ("Internal server
 * error"), which is stored and replayed to every retry; nothing is committed. Without the
 * library both transactions run, each on a connection of its own: 201, the row committed.
 *
 *   await Promise.all([
 *     dataSource.transaction(async (m) => { if (dto.note) await m.insert(Note, …); }), // nothing to do
 *     dataSource.transaction(async (m) => { await m.query('INSERT INTO adv75a_rows …'); }),
 *   ]);
 *
 * Why: `LazyTransaction.ensureRunner` (lib/data-layers/lazy-transaction.ts) queues the starts
 * (`startFrom`: "TypeORM names a savepoint by the depth it starts at, and two started at once
 * would both read the same depth"), but not a commit against a start. The first's commit
 * (`commitFrom`: nothing else is open, `refuseOutOfOrder` lets it through, as `NestedIdentity`
 * does not know the second yet) sends `RELEASE SAVEPOINT typeorm_1` while the second's
 * `startNow` is between its `keepNestedState('beside_3')` (it was judged begun beside the
 * first) and TypeORM's `SAVEPOINT typeorm_${transactionDepth}`: the second reads depth 2 before
 * the first's commit decrements it, makes `typeorm_2`, and the runner ends at depth 2 with the
 * second open on `typeorm_2`. Its commit then releases `typeorm_1`, which the first already
 * released: 3B001, the request's transaction aborted. Neither `refuseOutOfOrder` nor
 * `refuseLeftOpen` is reached: no `transaction_aborted`, the handler's own 500 is stored.
 *
 * Expected (docs/guides/transactions.md, "One request, one connection"): the refusal stated
 * for two nested transactions at once is "the first to end while the other, begun after it
 * through another query runner, is still open is refused (its commit rejects ...), and the
 * request answers 500 `transaction_aborted`". Here the first ends before the second's savepoint
 * exists, its commit succeeds, and the second, correct code, fails with a database error about
 * a savepoint the library named: either it runs as without the library (201, its row), or at
 * most the documented refusal (500 `transaction_aborted`). Not a bare 500 stored forever.
 *
 * Control: without `@Idempotent()` (201, the row), and the same keyed program with the two
 * transactions awaited one after the other (201, the row).
 *
 * Severity: medium (a false refusal of correct code, deterministic on every run here, its
 * error answer stored and replayed to every retry; no effect kept).
 *
 * Fails now: `expect(['201 ["b"]', '500 transaction_aborted']).toContain(outcome)`:
 * Expected value: "500 undefined" (both variants: the first empty, the first a `SELECT 1`;
 * the handler met `QueryFailedError: savepoint "typeorm_1" does not exist`; the retry
 * replays the same 500). The two controls pass.
 *
 * Suggested fix: put commits and rollbacks of nested transactions in the same queue as the
 * starts (`this.starts`), so a start reads the depth only after a commit under way has
 * decremented it (the second then makes `typeorm_1` after the first's RELEASE); or at least
 * refuse a commit while `startsUnderWay > 0` with the documented error.
 *
 * Fixed: starts, commits and rollbacks of nested transactions run in one queue
 * (`LazyTransaction.inTurn`, lib/data-layers/lazy-transaction.ts), so a commit never runs while
 * another's start is under way; and a commit that then meets another view's nested
 * transaction open after its own is put off rather than refused (`NestedIdentity.commitLater`,
 * lib/data-layers/nested-identity.ts, in `commitFrom`): it resolves for its code at once, and
 * its savepoint is released (with its COMMIT's put-backs) once the ones after it ended
 * (`releaseCommitted`, after each commit and rollback, via `committedInnermost`).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource, type EntityManager } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body75 = { tag: string; first: 'empty' | 'read'; serial?: boolean };

@Injectable()
class PairService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private first(body: Body75) {
    return this.dataSource.transaction(async (manager: EntityManager) => {
      if (body.first === 'read') await manager.query('SELECT 1');
    });
  }

  private second(body: Body75) {
    return this.dataSource.transaction(async (manager: EntityManager) => {
      await manager.query(`INSERT INTO adv75a_rows (tag, what) VALUES ($1, 'b')`, [body.tag]);
    });
  }

  async run(body: Body75) {
    if (body.serial) {
      await this.first(body);
      await this.second(body);
    } else {
      await Promise.all([this.first(body), this.second(body)]);
    }
    return { tag: body.tag };
  }
}

@Controller()
class PairController {
  constructor(private readonly pair: PairService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body75) {
    return this.pair.run(body);
  }

  @Post('plain')
  plain(@Body() body: Body75) {
    return this.pair.run(body);
  }
}

describe('adversary 75: TypeORM, Promise.all of two transactions, the first short', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75_orm_all_short_first', {
      controllers: [PairController],
      providers: [PairService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv75a_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv75a_rows WHERE tag = $1 ORDER BY id',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body75) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), both transactions run: 201, the row', async () => {
    expect((await post('/plain', undefined, { tag: 'p1', first: 'empty' })).status).toBe(201);
    expect(await kept('p1')).toEqual(['b']);
    expect((await post('/plain', undefined, { tag: 'p2', first: 'read' })).status).toBe(201);
    expect(await kept('p2')).toEqual(['b']);
  }, 20_000);

  it('control: keyed, the two awaited one after the other: 201, the row', async () => {
    expect((await post('/keyed', 'k0', { tag: 'k0', first: 'empty', serial: true })).status).toBe(
      201,
    );
    expect(await kept('k0')).toEqual(['b']);
  }, 20_000);

  for (const first of ['empty', 'read'] as const) {
    it(`keyed, Promise.all, the first ${first}: 201 with the row, or the documented refusal`, async () => {
      const key = `k-${first}`;
      const answer = await post('/keyed', key, { tag: key, first });
      const rows = await kept(key);
      const outcome =
        answer.status === 201
          ? `201 ${JSON.stringify(rows)}`
          : `${answer.status} ${String(answer.body.code)}${rows.length ? ` ${JSON.stringify(rows)}` : ''}`;
      const retry = await post('/keyed', key, { tag: key, first });
      expect(retry.status).toBe(answer.status);
      expect(['201 ["b"]', '500 transaction_aborted']).toContain(outcome);
      if (answer.status !== 201) expect(rows).toEqual([]);
    }, 20_000);
  }
});
