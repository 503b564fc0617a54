/**
 * Adversary 75d: on TypeORM, a handler that starts with `RESET ALL` (a clean slate, whatever
 * an earlier user of the pooled connection left) and then narrows its own statements with the
 * row-level-security recipe (`SET LOCAL ROLE app_user`) fails under `@Idempotent()`: the
 * library's own last statement (the stored answer's update) runs as the handler's role, which
 * may not write `idempotency_keys` (42501), and the request answers 500 with its work rolled
 * back. Without the library: 201, the row. Without the `RESET ALL`: 201 (the library puts its
 * role back).
 *
 *   await dataSource.query('RESET ALL');
 *   await dataSource.query('SET LOCAL ROLE app_user');
 *   await dataSource.query(`SELECT set_config('request.user', 'alice', true)`);
 *   await dataSource.query('INSERT INTO notes (owner, body) VALUES ($1, $2)', ['alice', body]);
 *
 * Why: the request's transaction keeps the role, session authorization and search path it
 * began with in transaction settings (`CAPTURE_SESSION_STATE`, lib/connection/session-state.ts,
 * sent with the `BEGIN`), and the library's last statement puts them back from there
 * (`RESTORE_SESSION_STATE`, in `fencedCommit`, lib/claim/fenced-commit.ts) under the guard
 * `KEPT` (`current_setting('idempotency.role', true) <> ''`). `RESET ALL` resets those custom
 * settings to '' too, so the guard skips the put-back in silence, and the update runs as
 * `app_user`. Round 74b moved the nested transactions' kept state into the process
 * (`LazyTransaction.keepState`), not the request's own; `sessionSettingsOf` lets `RESET ALL`
 * through (it names none), and nothing notices it touched the library's state.
 *
 * Expected (docs/guides/transactions.md, "`SET LOCAL ROLE` and `search_path` are the
 * handler's own"): "A handler may narrow its own statements (`SET LOCAL ROLE app_user`, …)"
 * and "The library's own statements in the transaction (the stored answer's update, a lease
 * renewal, a body stored apart) run with the role and search path the transaction began
 * with, whatever the handler set". `RESET ALL` is not refused nor listed as a limit for the
 * request's own statements (the only mention is inside a nested transaction).
 *
 * Control: the same route without `@Idempotent()` (201, the row), and the same keyed route
 * without the `RESET ALL` (201, the row, replayed).
 *
 * Severity: medium (a false refusal of correct, documented usage, deterministic; the work is
 * rolled back, nothing lost in silence). The same skip applies to a lease renewal or a body
 * stored apart mid-request (`SWAP_IN_SESSION_STATE`), and to a `SET LOCAL search_path` to a
 * schema without the library's table (42P01).
 *
 * Fails now: `expect(...).toEqual({ status: 201, error: '', replayed: true, rows: 1 })`:
 * Received `{ status: 500, error: "…database_permanent…The database refused the idempotency
 * store for a reason that lasts (… a missing privilege …)", replayed: false, rows: 0 }`: the
 * app's database blamed (permanent) for the library's own role mix-up. The two controls pass.
 *
 * Suggested fix: keep the request's begun-with role, authorization and search path in the
 * process as well (read back from `CAPTURE_SESSION_STATE`'s round trip, as `keepState` does
 * for nested ones) and put them back from literals; or treat `RESET ALL` as touching the kept
 * state and re-keep it after the statement.
 *
 * Fixed: the role, session authorization and search path the request began with are read back from
 * `CAPTURE_SESSION_STATE`'s row into the process (`begunStateOf`, lib/connection/session-state.ts;
 * `RequestTransaction.begunState`, set in `beginWith`'s `onCaptured`, `begin` and
 * `beginWithClaim`), and put back from literals (`restoreSessionState` in `fencedCommit`,
 * `swapSessionState` in `ownStatement`), which `RESET ALL` cannot reach.
 */
import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

let role: string;

type Body75d = { note: string; reset: boolean };

async function handle(dataSource: DataSource, body: Body75d) {
  if (body.reset) await dataSource.query('RESET ALL');
  await dataSource.query(`SET LOCAL ROLE ${role}`);
  await dataSource.query(`SELECT set_config('request.user', 'alice', true)`);
  await dataSource.query(`INSERT INTO notes (owner, body) VALUES ('alice', $1)`, [body.note]);
  return { note: body.note };
}

@Controller()
class NotesController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('notes')
  @Idempotent()
  idempotent(@Body() body: Body75d) {
    return handle(this.dataSource, body);
  }

  @Post('plain-notes')
  plain(@Body() body: Body75d) {
    return handle(this.dataSource, body);
  }
}

describe('adversary 75d: TypeORM, RESET ALL in the request, then SET LOCAL ROLE', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75d_orm_reset_all_role', {
      controllers: [NotesController],
      setup: async (admin, database) => {
        role = `adv75d_app_${database.name.slice(-8)}`;
        await admin.query(`
          CREATE ROLE ${role} NOLOGIN;
          CREATE TABLE notes (id serial PRIMARY KEY, owner text NOT NULL, body text NOT NULL);
          GRANT SELECT, INSERT ON notes TO ${role};
          GRANT USAGE ON SEQUENCE notes_id_seq TO ${role};
          ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
          CREATE POLICY own_notes ON notes TO ${role}
            USING (owner = current_setting('request.user', true))
            WITH CHECK (owner = current_setting('request.user', true));`);
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
    const cluster = new Client({ connectionString: process.env.TEST_DATABASE_URL });
    await cluster.connect();
    await cluster.query(`DROP ROLE IF EXISTS ${role}`).catch(() => undefined);
    await cluster.end();
  });

  const kept = async (note: string) =>
    Number(
      (await admin.query<{ n: string }>('SELECT count(*) AS n FROM notes WHERE body = $1', [note]))
        .rows[0].n,
    );

  const send = (path: string, key: string | undefined, body: Body75d) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), RESET ALL first: 201, the row', async () => {
    const answer = await send('/plain-notes', undefined, { note: 'plain', reset: true });
    expect({ status: answer.status, rows: await kept('plain') }).toEqual({ status: 201, rows: 1 });
  });

  it('control: keyed, without RESET ALL: 201, the row, replayed', async () => {
    const first = await send('/notes', 'k0', { note: 'k0', reset: false });
    const replay = await send('/notes', 'k0', { note: 'k0', reset: false });
    expect({
      status: first.status,
      replayed: replay.status === 201 && replay.text === first.text,
      rows: await kept('k0'),
    }).toEqual({ status: 201, replayed: true, rows: 1 });
  });

  it('keyed, RESET ALL first: 201, the row, replayed (the library runs its own as the begun-with role)', async () => {
    const first = await send('/notes', 'k1', { note: 'k1', reset: true });
    const replay = await send('/notes', 'k1', { note: 'k1', reset: true });
    expect({
      status: first.status,
      error: first.status === 201 ? '' : first.text,
      replayed: replay.status === 201 && replay.text === first.text,
      rows: await kept('k1'),
    }).toEqual({ status: 201, error: '', replayed: true, rows: 1 });
  });
});
