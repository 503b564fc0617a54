/**
 * Adversary 75: on TypeORM, a nested transaction that tries a setting inside a savepoint of
 * its own code's and rolls it back (`SAVEPOINT try_tenant`, `set_config('app.tenant', …,
 * true)`, `ROLLBACK TO SAVEPOINT try_tenant`, as code that probes a tenant and backs out does)
 * is still taken for one that set a setting: a write sent beside it while it is open (an
 * injected service's `dataSource.query()` inside its callback) is refused with
 * `StatementBesideNestedTransactionError`, and the request answers 500, stored and replayed.
 * Without the library the write runs on a connection of its own, and the nested transaction
 * has no setting in force anyway (PostgreSQL's `ROLLBACK TO` put it back): 201, both rows.
 *
 *   await dataSource.transaction(async (manager) => {
 *     await manager.query('SAVEPOINT try_tenant');
 *     await manager.query(`SELECT set_config('app.tenant', 'acme', true)`);
 *     await manager.query('ROLLBACK TO SAVEPOINT try_tenant');        // the setting is gone
 *     await audit.write(tag);       // dataSource.query('INSERT …'), beside it: refused
 *     await manager.query('INSERT INTO adv75p_rows …');
 *   });
 *
 * Why: `NestedIdentity.besideIdentity` (lib/data-layers/nested-identity.ts) marks the nested
 * transaction `localSettings` when its code sets a setting (`localSettingsOf`), and only its
 * own end (`endedAt`) clears it: the app's own savepoints inside it are not followed, so a
 * `ROLLBACK TO SAVEPOINT` that undid the setting leaves the mark, and every statement beside
 * it is refused `settings` until it ends. (The pool seam follows them: `PoolTransaction`'s
 * `InnerSavepoint`s.)
 *
 * Expected (docs/guides/transactions.md, "One request, one connection"): a statement beside a
 * nested transaction is refused once it "has set … any setting for itself", because it
 * "would run as that role"/under that setting; here none is in force, and the write beside it
 * runs as it would apart: 201, both rows.
 *
 * Control: without `@Idempotent()` (201, both rows), and the same keyed program with the
 * setting left in force (no `ROLLBACK TO`: refused, 500, nothing kept, as documented).
 *
 * Severity: low (a false refusal of correct, unusual code: the key's work never done).
 *
 * Fixed: `NestedIdentity` (lib/data-layers/nested-identity.ts) follows its code's own
 * savepoints inside each nested transaction (`NestedTransaction.inner`, `noteSavepoint`, read
 * in `besideIdentity` with `savepointControlsOf`): what is set after `SAVEPOINT x` is noted on
 * `x`, a `ROLLBACK TO x` undoes the note, a `RELEASE` keeps it in the one around (`hasSet`
 * reads them all), as the pool seam's `InnerSavepoint`s do.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body75 = { tag: string; keep?: boolean };

@Injectable()
class AuditService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** Its own write, through the DataSource (beside a transaction it knows nothing of). */
  write(tag: string) {
    return this.dataSource.query(`INSERT INTO adv75p_rows (tag, what) VALUES ($1, 'audit')`, [tag]);
  }
}

@Injectable()
class TenantService {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly audit: AuditService,
  ) {}

  async run(body: Body75) {
    await this.dataSource.transaction(async (manager) => {
      await manager.query('SAVEPOINT try_tenant');
      await manager.query(`SELECT set_config('app.tenant', 'acme', true)`);
      if (!body.keep) await manager.query('ROLLBACK TO SAVEPOINT try_tenant');
      await this.audit.write(body.tag);
      await manager.query(`INSERT INTO adv75p_rows (tag, what) VALUES ($1, 'order')`, [body.tag]);
    });
    return { tag: body.tag };
  }
}

@Controller()
class TenantController {
  constructor(private readonly tenants: TenantService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body75) {
    return this.tenants.run(body);
  }

  @Post('plain')
  plain(@Body() body: Body75) {
    return this.tenants.run(body);
  }
}

describe('adversary 75: TypeORM, a setting rolled back to an app savepoint still refuses beside', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75_orm_app_savepoint', {
      controllers: [TenantController],
      providers: [TenantService, AuditService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv75p_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv75p_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body75) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(): 201, both rows', async () => {
    const answer = await post('/plain', undefined, { tag: 'p1' });
    expect({ status: answer.status, rows: await kept('p1') }).toEqual({
      status: 201,
      rows: ['audit', 'order'],
    });
  }, 20_000);

  it('control: keyed, the setting left in force: the write beside is refused, nothing kept', async () => {
    const answer = await post('/keyed', 'k0', { tag: 'k0', keep: true });
    expect({ status: answer.status, rows: await kept('k0') }).toEqual({ status: 500, rows: [] });
  }, 20_000);

  it('keyed, the setting rolled back to its savepoint: 201, both rows, and the retry replays', async () => {
    const answer = await post('/keyed', 'k1', { tag: 'k1' });
    const retry = await post('/keyed', 'k1', { tag: 'k1' });
    expect({
      status: answer.status,
      rows: await kept('k1'),
      retry: `${retry.status} ${String(retry.headers['idempotent-replayed'])}`,
    }).toEqual({ status: 201, rows: ['audit', 'order'], retry: '201 true' });
  }, 20_000);
});
