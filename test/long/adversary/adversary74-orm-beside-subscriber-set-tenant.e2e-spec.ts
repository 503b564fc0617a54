/**
 * Adversary 74: on TypeORM, a setting made for each transaction by an `afterTransactionStart`
 * subscriber (the row-level-security tenant, `set_config('app.tenant', …, true)` through
 * `event.queryRunner`, the pattern adversary 10 used) is not noted on the nested transaction,
 * so a statement sent beside it (the service's own `dataSource.query()` inside
 * `dataSource.transaction()`'s callback) is not refused: it runs inside the nested
 * transaction, as that tenant, and commits stamped with it under a 201. Without the library
 * that statement runs outside any transaction, on a connection of its own (no transaction
 * start, no subscriber): no tenant. The same program whose callback sets the tenant itself is
 * refused, as the docs say (adversary 73's fix).
 *
 *   @EventSubscriber() class Tenancy {
 *     async afterTransactionStart(event) {
 *       await event.queryRunner.query(`SELECT set_config('app.tenant', 'acme', true)`);
 *     }
 *   }
 *   await dataSource.transaction(async (manager) => {
 *     await manager.query(`INSERT … 'order', current_setting('app.tenant', true)`);
 *     await dataSource.query(`INSERT … 'audit', current_setting('app.tenant', true)`); // beside
 *   });
 *
 * Why: `LazyTransaction`'s `startNow` (lib/data-layers/lazy-transaction.ts) calls
 * `this.nested.started(owner)` only AFTER TypeORM's `startTransaction()` returned, and TypeORM
 * broadcasts `AfterTransactionStart` inside it (after `SAVEPOINT`, depth already counted). The
 * subscriber's `set_config` comes through the view (`asOwner` hands it as `event.queryRunner`),
 * but `NestedIdentity.besideIdentity` finds no open nested transaction of that view yet
 * (`own` undefined, `this.open` without it) and marks nothing: `localSettings` stays false,
 * and the beside statement later is let through (lib/data-layers/nested-identity.ts).
 *
 * Expected (docs/guides/transactions.md): "Once that nested transaction has set its role ...
 * or any setting for itself (`SET LOCAL statement_timeout`, `set_config('app.tenant', …,
 * true)`), such a call (`dataSource.query()`, a repository, a query builder ...) would run as
 * that role ...: it is refused as it is sent with `StatementBesideNestedTransactionError`";
 * data-layers.md: "the statement would run under that timeout, as that tenant".
 *
 * Control: without `@Idempotent()`: 201, the audit with no tenant; keyed, the callback sets
 * the tenant itself: the documented refusal (500, nothing kept).
 *
 * Severity: high (a row committed under a stored 201 stamped with a tenant it was never
 * given: row-level security's tenant leaks onto a write that belongs to no tenant).
 *
 * Fails now: 'Received: "201, rows ["audit:acme","order:acme"]"' (the two controls pass).
 *
 * Fixed: the nested transaction is open from its `afterTransactionStart` broadcast on
 * (`CommitSteps.started`), before its subscribers run: what they set is noted on it.
 */
import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import {
  DataSource,
  type EntitySubscriberInterface,
  EventSubscriber,
  type TransactionStartEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/** Whether the subscriber sets the tenant (else the callback does). */
let bySubscriber = true;

@EventSubscriber()
class Tenancy implements EntitySubscriberInterface {
  async afterTransactionStart(event: TransactionStartEvent) {
    if (bySubscriber) {
      await event.queryRunner.query(`SELECT set_config('app.tenant', 'acme', true)`);
    }
  }
}

async function work(dataSource: DataSource, tag: string) {
  await dataSource.transaction(async (manager) => {
    if (!bySubscriber) await manager.query(`SELECT set_config('app.tenant', 'acme', true)`);
    await manager.query(
      `INSERT INTO adv74s_rows (tag, what, tenant)
       VALUES ($1, 'order', current_setting('app.tenant', true))`,
      [tag],
    );
    // The service's own audit, through the DataSource (beside the nested transaction).
    await dataSource.query(
      `INSERT INTO adv74s_rows (tag, what, tenant)
       VALUES ($1, 'audit', current_setting('app.tenant', true))`,
      [tag],
    );
  });
  return { tag };
}

@Controller()
class RowsController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: { tag: string }) {
    return work(this.dataSource, body.tag);
  }

  @Post('plain')
  plain(@Body() body: { tag: string }) {
    return work(this.dataSource, body.tag);
  }
}

describe('adversary 74: TypeORM, a statement beside a nested transaction whose subscriber set the tenant', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv74_orm_subscriber_tenant', {
      controllers: [RowsController],
      subscribers: [Tenancy],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv74s_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL, tenant text)',
        );
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  beforeEach(() => {
    bySubscriber = true;
  });

  const kept = async (tag: string) =>
    (
      await admin.query<{ what: string }>(
        `SELECT what || ':' || coalesce(nullif(tenant, ''), '-') AS what FROM adv74s_rows
          WHERE tag = $1 ORDER BY what`,
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, tag: string) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send({ tag });
  };

  it('control: without @Idempotent(), the audit has no tenant', async () => {
    expect((await post('/plain', undefined, 'p1')).status).toBe(201);
    expect(await kept('p1')).toEqual(['audit:-', 'order:acme']);
  }, 20_000);

  it('control: keyed, the callback sets the tenant itself: the documented refusal', async () => {
    bySubscriber = false;
    expect((await post('/keyed', 'k0', 'k0')).status).toBe(500);
    expect(await kept('k0')).toEqual([]);
  }, 20_000);

  it('keyed, the subscriber sets it: the audit not stamped, or refused', async () => {
    const answer = await post('/keyed', 'k1', 'k1');
    const rows = await kept('k1');
    const outcome =
      (answer.status === 201 && JSON.stringify(rows) === '["audit:-","order:acme"]') ||
      (answer.status === 500 && rows.length === 0)
        ? 'as without the library, or refused'
        : `${answer.status}, rows ${JSON.stringify(rows)}`;
    expect(outcome).toBe('as without the library, or refused');
  }, 20_000);
});
