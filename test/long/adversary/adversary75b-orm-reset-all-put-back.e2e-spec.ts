/**
 * Adversary 75b: on TypeORM, `RESET ALL` inside a `dataSource.transaction()` (its own, or one
 * begun beside another under `Promise.all`) makes that transaction's COMMIT fail after its
 * savepoint was released: PostgreSQL's `role "" does not exist` (a `QueryFailedError`), the
 * request's transaction aborted, a 500 stored and
 * replayed to every retry. Without the library the same code commits: 201, its row.
 *
 *   await dataSource.transaction(async (m) => {
 *     await m.query('RESET ALL');          // back to the server's defaults for this work
 *     await m.query('INSERT INTO adv75b_rows …');
 *   });
 *
 * Why: `LazyTransaction.ensureRunner` (lib/data-layers/lazy-transaction.ts, `startNow`) keeps
 * the role, session authorization and search path the nested transaction began with in
 * custom settings of the request's transaction (`keepNestedState(OUTERMOST_KEPT_AS)`, or
 * `keepNestedState(besideName(depth))` for one begun beside another), set with
 * `set_config(…, true)`; `commitFrom`'s `afterRelease` then puts them back with
 * `restoreNestedState(...)` (lib/connection/session-state.ts), which reads them with
 * `current_setting('idempotency.<name>_authorization')` and `…_role`. `RESET ALL` resets every
 * setting, the library's placeholders `idempotency.*` too (to ''), so the put-back sets
 * `session_authorization` / `role` to '' and fails. The commit rejects after the RELEASE
 * (`releasedFor`), TypeORM's `transaction()` rejects with that error, the handler's 500 is
 * stored. `sessionSettingsOf` (lib/transaction/sql/sql-text.ts) leaves `RESET ALL` out ("it
 * names none"), and no check reads it as touching what the library kept.
 *
 * Expected (docs/guides/transactions.md, TypeORM nested transactions): the library makes the
 * COMMIT of a `dataSource.transaction()` "put back the role, search path and settings it began
 * with"; the only stated limit for `RESET ALL` is that its settings are not put back ("not
 * `RESET ALL`, which names none"), not that the transaction can no longer commit. Correct
 * code that commits without the library must not fail under `@Idempotent()`.
 *
 * Control: the same route without `@Idempotent()` (201, the row), and the same keyed route
 * with `RESET statement_timeout` (a named RESET) instead of `RESET ALL` (201, the row).
 *
 * Severity: medium (a false refusal of correct code, deterministic, its 500 stored and
 * replayed to every retry; nothing committed).
 *
 * Fails now: `expect(`${status} ${handler's error}`).toBe('201 ')`: Received:
 * "500 QueryFailedError: role \"\" does not exist", for both the transaction alone and the one
 * begun beside another; the retry replays the same 500. The two controls pass.
 *
 * Suggested fix: treat `RESET ALL` in a nested transaction as touching the library's kept
 * state: re-keep it right after such a statement (send `keepNestedState(name)` again from the
 * values kept in the process, or read them before the statement and set them back after it),
 * or keep the begun-with values in the process (read once at start) instead of in
 * transaction-local placeholders that `RESET ALL` wipes; `RESTORE_SESSION_STATE` for the
 * request's own statements has the same exposure (its `KEPT` guard then silently skips).
 *
 * Fixed: the role, session authorization, search path and start a nested transaction keeps
 * are read back into the process (`LazyTransaction.keepState`, `keepNestedState`'s row) and
 * put back from there (`restoreState`, `restoreNestedState(name, kept)` in
 * lib/connection/session-state.ts; `NestedCommit.endingText`'s `beganAt`), which `RESET ALL`
 * cannot reach.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource, type EntityManager } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body75b = { tag: string; reset: 'RESET ALL' | 'RESET statement_timeout'; beside?: boolean };

/** What the handler met, by tag. */
const met = new Map<string, string>();

@Injectable()
class ResetService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private write(body: Body75b, what: string) {
    return this.dataSource.transaction(async (manager: EntityManager) => {
      await manager.query(body.reset);
      await manager.query(`INSERT INTO adv75b_rows (tag, what) VALUES ($1, $2)`, [body.tag, what]);
    });
  }

  private other(body: Body75b) {
    return this.dataSource.transaction(async (manager: EntityManager) => {
      await manager.query(`INSERT INTO adv75b_rows (tag, what) VALUES ($1, 'other')`, [body.tag]);
    });
  }

  async run(body: Body75b) {
    try {
      await this.both(body);
    } catch (error) {
      met.set(body.tag, String(error));
      throw error;
    }
    return { tag: body.tag };
  }

  private async both(body: Body75b) {
    if (body.beside) {
      // The long one first: the RESET ALL one is begun beside it, and ends first.
      await this.dataSource.transaction(async (manager: EntityManager) => {
        await manager.query(`INSERT INTO adv75b_rows (tag, what) VALUES ($1, 'outer')`, [body.tag]);
        await this.write(body, 'reset');
      });
    } else {
      await this.write(body, 'reset');
      await this.other(body);
    }
  }
}

@Controller()
class ResetController {
  constructor(private readonly service: ResetService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body75b) {
    return this.service.run(body);
  }

  @Post('plain')
  plain(@Body() body: Body75b) {
    return this.service.run(body);
  }
}

describe('adversary 75b: TypeORM, RESET ALL inside a dataSource.transaction()', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75b_orm_reset_all', {
      controllers: [ResetController],
      providers: [ResetService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv75b_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv75b_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body75b) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), RESET ALL alone and beside: 201, the rows', async () => {
    expect((await post('/plain', undefined, { tag: 'p1', reset: 'RESET ALL' })).status).toBe(201);
    expect(await kept('p1')).toEqual(['other', 'reset']);
    expect(
      (await post('/plain', undefined, { tag: 'p2', reset: 'RESET ALL', beside: true })).status,
    ).toBe(201);
    expect(await kept('p2')).toEqual(['outer', 'reset']);
  }, 20_000);

  it('control: keyed, a named RESET instead of RESET ALL: 201, the rows', async () => {
    const body: Body75b = { tag: 'k0', reset: 'RESET statement_timeout' };
    expect((await post('/keyed', 'k0', body)).status).toBe(201);
    expect(await kept('k0')).toEqual(['other', 'reset']);
    const beside: Body75b = { tag: 'k0b', reset: 'RESET statement_timeout', beside: true };
    expect((await post('/keyed', 'k0b', beside)).status).toBe(201);
    expect(await kept('k0b')).toEqual(['outer', 'reset']);
  }, 20_000);

  it('keyed, RESET ALL in a transaction of its own: 201 with the rows, as without the library', async () => {
    const body: Body75b = { tag: 'k1', reset: 'RESET ALL' };
    const answer = await post('/keyed', 'k1', body);
    const retry = await post('/keyed', 'k1', body);
    expect(retry.status).toBe(answer.status);
    expect(`${answer.status} ${met.get('k1') ?? ''}`).toBe('201 ');
    expect(await kept('k1')).toEqual(['other', 'reset']);
  }, 20_000);

  it('keyed, RESET ALL in a transaction begun beside another: 201 with the rows', async () => {
    const body: Body75b = { tag: 'k2', reset: 'RESET ALL', beside: true };
    const answer = await post('/keyed', 'k2', body);
    const retry = await post('/keyed', 'k2', body);
    expect(retry.status).toBe(answer.status);
    expect(`${answer.status} ${met.get('k2') ?? ''}`).toBe('201 ');
    expect(await kept('k2')).toEqual(['outer', 'reset']);
  }, 20_000);
});
