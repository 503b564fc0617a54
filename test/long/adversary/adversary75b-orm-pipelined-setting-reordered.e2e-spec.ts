/**
 * Adversary 75b: on TypeORM, inside a `dataSource.transaction()`, a statement that sets a
 * setting for the transaction and the statement after it, sent one after the other without
 * awaiting the first (node-postgres queues a client's statements and runs them in the order
 * they were sent), run in the other order under `@Idempotent()`: the write runs before the
 * setting it reads, and commits stamped with no actor (or a stale one) under a stored 201.
 * Without the library: in order, the row stamped with the request's actor.
 *
 *   await dataSource.transaction(async (m) => {
 *     const client = await m.queryRunner!.connect();          // or m.query(...) for both
 *     await Promise.all([
 *       client.query("SELECT set_config('app.actor', $1, true)", [actor]),
 *       client.query('INSERT INTO adv75c_rows (tag) VALUES ($1)', [tag]), // actor DEFAULT current_setting('app.actor', true)
 *     ]);
 *   });
 *
 * Why: inside a nested transaction, `LazyTransaction.clientOf` (the runner's node-postgres
 * client, lib/data-layers/lazy-transaction.ts) sends each statement only after
 * `keepSettingsOf(view, …)` resolved (`kept.then(send)`), and `queryFrom` (the view's
 * `query()`) only after `await keepSettings(from, args)`: `NestedCommit.before`
 * (lib/data-layers/nested-commit.ts) reads the values of the settings a statement sets with a
 * round trip of its own (`READ_SETTINGS`) first, so the `set_config` waits one round trip,
 * while the INSERT, which sets nothing, is sent after a few microtasks: the INSERT reaches the
 * connection first. The order the client was given is lost; nothing refuses.
 *
 * Expected (docs/guides/transactions.md): a `dataSource.transaction()` runs "as without the
 * library" as a savepoint of the request's transaction, and a statement through the node-postgres
 * client a runner hands out is the transaction's own; node-postgres runs a client's queries in
 * the order they were sent (its documented queue), and the app relies on it.
 * docs/guides/data-layers.md says it of the pool seam's clients: "Statements queued on one such
 * client without awaiting (`Promise.all([client.query('BEGIN'), client.query('INSERT …')])`)
 * run in the order called, as node-postgres runs them".
 *
 * Control: without `@Idempotent()` (201, the actor stamped), and the same keyed route with the
 * two statements awaited one after the other (201, the actor stamped).
 *
 * Severity: high (a wrong effect committed under a stored success: the row's actor is lost, or
 * a previous setting's value is used; with row-level security keyed on the setting, a row
 * written for the wrong tenant).
 *
 * Fails now: `expect(actors).toEqual(['alice'])`: Received: [null] (for the client path and
 * for the view's `query()` path), with the answer 201. The two controls pass.
 *
 * Suggested fix: keep each view's (and each client's) statements in the order they were sent:
 * chain every statement's send behind the previous one's `keepSettings` (a per-view promise
 * queue), or read the settings' earlier values in the same round trip as the statement (a
 * multi-statement text for the simple protocol, or a server-side capture), never by a round
 * trip that lets a later statement overtake it.
 *
 * Fixed: each view's statements (its `query()` and its node-postgres client's) are sent in the
 * order called: `SendOrder.after` (lib/data-layers/send-order.ts) chains each one's
 * preparation (`keepSettings`, `NestedCommit.before`'s round trip) and send behind the previous
 * one's send, in `LazyTransaction.ensureRunner` (`queryFrom`) and `LazyTransaction.clientOf`.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client, type PoolClient } from 'pg';
import request from 'supertest';
import { DataSource, type EntityManager } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body75c = { tag: string; actor: string; via: 'client' | 'view'; serial?: boolean };

const SET_ACTOR = "SELECT set_config('app.actor', $1, true)";
const INSERT = 'INSERT INTO adv75c_rows (tag) VALUES ($1)';

@Injectable()
class StampService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async run(body: Body75c) {
    await this.dataSource.transaction(async (manager: EntityManager) => {
      const send =
        body.via === 'client'
          ? await (async () => {
              const client = (await manager.queryRunner!.connect()) as PoolClient;
              return (text: string, values: unknown[]) => client.query(text, values);
            })()
          : (text: string, values: unknown[]) => manager.query(text, values);
      if (body.serial) {
        await send(SET_ACTOR, [body.actor]);
        await send(INSERT, [body.tag]);
      } else {
        await Promise.all([send(SET_ACTOR, [body.actor]), send(INSERT, [body.tag])]);
      }
    });
    return { tag: body.tag };
  }
}

@Controller()
class StampController {
  constructor(private readonly service: StampService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body75c) {
    return this.service.run(body);
  }

  @Post('plain')
  plain(@Body() body: Body75c) {
    return this.service.run(body);
  }
}

describe('adversary 75b: TypeORM, a setting and the write after it sent without awaiting', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75b_orm_pipelined_setting', {
      controllers: [StampController],
      providers: [StampService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv75c_rows (id serial PRIMARY KEY, tag text NOT NULL, ' +
            "actor text DEFAULT nullif(current_setting('app.actor', true), ''))",
        );
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const actors = async (tag: string) =>
    (
      await admin.query<{ actor: string | null }>(
        'SELECT actor FROM adv75c_rows WHERE tag = $1 ORDER BY id',
        [tag],
      )
    ).rows.map((row) => row.actor);

  const post = (path: string, key: string | undefined, body: Body75c) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), sent without awaiting: in order, the actor stamped', async () => {
    for (const via of ['client', 'view'] as const) {
      const tag = `p-${via}`;
      expect((await post('/plain', undefined, { tag, actor: 'alice', via })).status).toBe(201);
      expect(await actors(tag)).toEqual(['alice']);
    }
  }, 20_000);

  it('control: keyed, the two awaited one after the other: the actor stamped', async () => {
    for (const via of ['client', 'view'] as const) {
      const tag = `k0-${via}`;
      const answer = await post('/keyed', tag, { tag, actor: 'alice', via, serial: true });
      expect(answer.status).toBe(201);
      expect(await actors(tag)).toEqual(['alice']);
    }
  }, 20_000);

  for (const via of ['client', 'view'] as const) {
    it(`keyed, through the ${via}, sent without awaiting: the actor stamped, as without the library`, async () => {
      const tag = `k-${via}`;
      const answer = await post('/keyed', tag, { tag, actor: 'alice', via });
      expect(answer.status).toBe(201);
      expect(await actors(tag)).toEqual(['alice']);
    }, 20_000);
  }
});
