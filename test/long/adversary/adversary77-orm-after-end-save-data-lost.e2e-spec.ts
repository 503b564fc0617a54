/**
 * Adversary 77 (orm): work the handler leaves running (a mailer's rename, not awaited) makes
 * its query runner during the request, awaits slow I/O (a KMS call), and saves once the
 * request was answered, with `save(…, { data: { actor } })`, which a subscriber reads as
 * `event.queryRunner.data` to stamp who changed the row. Without the library the row is
 * committed with `updated_by = 'mailer'`; keyed, it is committed with `updated_by = NULL`.
 *
 *   async renameItem(tag) {                        // left running by the handler
 *     const runner = this.dataSource.createQueryRunner();
 *     try {
 *       await kms.decrypt(…);                     // slow I/O: the request answers meanwhile
 *       await runner.manager.save(item, { data: { actor: 'mailer' } });
 *     } finally { await runner.release(); }
 *   }
 *   @EventSubscriber() class ItemSubscriber {
 *     beforeUpdate(event) { event.entity.updatedBy = event.queryRunner.data?.actor ?? null; }
 *   }
 *
 * Why: lib/data-layers/runner-view.ts `runnerView`: the view keeps the save's `data` (its
 * `set` trap), but once it has a runner of its own for a transaction started past the
 * request's end (`own = apart?.()` at `startTransaction`, `LazyTransaction.viewOf`'s
 * `runnerAfterEnd()`), every other property is read from that runner, `broadcaster`
 * included: the save's subscribers get that runner as `event.queryRunner`, whose `data` is
 * its own `{}`, not the `{ actor }` the save wrote on the view (the `data` check comes before
 * the `own` branch for the view's own reads only). The round's "a save's `data` option kept
 * per view" (commit 2decf6c) keeps it where the subscribers no longer look.
 *
 * Expected: TypeORM's `SaveOptions.data`: "Additional data to be passed with persist method.
 * This data can be used in subscribers then." (its subscribers read it as
 * `event.queryRunner.data`); lib/data-layers/runner-view.ts's own note: "a save writes its
 * `save(…, { data })` there for its subscribers (`event.queryRunner.data`)"; and
 * lib/data-layers/lazy-transaction.ts `joinedRunner`: "After the answer committed, work the
 * handler left running … runs on its own, as it would without the library".
 *
 * Control: the same app without `@Idempotent()` (`updated_by = 'mailer'`), and the keyed app
 * whose handler awaits the rename (the save inside the request: `updated_by = 'mailer'`).
 *
 * Severity: medium (a wrong effect committed: the row's audit column left NULL where the app's
 * code set it; the save and the request otherwise succeed, so nothing tells the app).
 *
 * Fails now: the keyed case's item is `{ name: 'renamed', updated_by: null }` where
 * `{ name: 'renamed', updated_by: 'mailer' }` is expected. The two controls pass.
 *
 * Suggested fix: in `runnerView`, when the view moves to a runner of its own, carry the
 * view's `data` over to it (`runnerOfIts.data = data` at `own = apart()`), and keep `data`
 * reads and writes on that runner while it is the view's (copying back at its end); or hand
 * the subscribers the view itself (its own broadcaster over the own runner), as before the
 * end.
 *
 * Fixed: `runnerView` carries the view's `data` over to its own after-the-end runner at its
 * `startTransaction()`, reads and writes `data` there while that runner is the view's, and
 * takes it back when its transaction ends (lib/data-layers/runner-view.ts).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  PrimaryColumn,
  type UpdateEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv77_items' })
class Item {
  @PrimaryColumn({ type: 'text' })
  id!: string;

  @Column({ type: 'text' })
  name!: string;

  @Column({ type: 'text', name: 'updated_by', nullable: true })
  updatedBy!: string | null;
}

/** A slow KMS call (the item's new name decrypted), answered when the test lets it. */
let kms: Promise<void> = Promise.resolve();

@EventSubscriber()
class ItemSubscriber implements EntitySubscriberInterface<Item> {
  listenTo() {
    return Item;
  }

  /** Who changed it, from the save's `data` (`save(…, { data: { actor } })`). */
  beforeUpdate(event: UpdateEvent<Item>) {
    const actor = (event.queryRunner.data as { actor?: string } | undefined)?.actor;
    if (event.entity) (event.entity as Item).updatedBy = actor ?? null;
  }
}

const saves: Promise<unknown>[] = [];
const met = new Map<string, string>();

@Injectable()
class ItemService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async rename(tag: string, awaited: boolean) {
    await this.dataSource.query(`INSERT INTO adv77_orders (tag) VALUES ($1)`, [tag]);
    const renamed = this.renameItem(tag).catch((error: unknown) => met.set(tag, String(error)));
    if (awaited) await renamed;
    else saves.push(renamed);
    return { tag };
  }

  /** The mailer's rename: its query runner first, then the KMS, then the save. */
  private async renameItem(tag: string) {
    const runner = this.dataSource.createQueryRunner();
    try {
      await kms;
      const item = Object.assign(new Item(), { id: tag, name: 'renamed' });
      await runner.manager.save(item, { data: { actor: 'mailer' } });
    } finally {
      await runner.release();
    }
  }
}

@Controller()
class ItemController {
  constructor(private readonly service: ItemService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: { tag: string; awaited: boolean }) {
    return this.service.rename(body.tag, body.awaited);
  }

  @Post('plain')
  plain(@Body() body: { tag: string; awaited: boolean }) {
    return this.service.rename(body.tag, body.awaited);
  }
}

describe('adversary 77: TypeORM, a save with data on a query runner made in the request, saved after its answer', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv77_orm_straddle_save_data', {
      controllers: [ItemController],
      providers: [ItemService],
      entities: [Item],
      subscribers: [ItemSubscriber],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          `CREATE TABLE adv77_items (id text PRIMARY KEY, name text NOT NULL, updated_by text);
           CREATE TABLE adv77_orders (id serial PRIMARY KEY, tag text NOT NULL);
           INSERT INTO adv77_items (id, name) VALUES ('p1', 'x'), ('k1', 'x'), ('k2', 'x')`,
        );
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const run = async (path: string, key: string | undefined, tag: string, awaited: boolean) => {
    let answer!: () => void;
    kms = awaited ? Promise.resolve() : new Promise<void>((resolve) => (answer = resolve));
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    const { status } = await call.send({ tag, awaited });
    // The KMS answers once the request was answered: the save goes on after its commit.
    answer?.();
    await Promise.all(saves.splice(0));
    const { rows } = await admin.query<{ name: string; updated_by: string | null }>(
      'SELECT name, updated_by FROM adv77_items WHERE id = $1',
      [tag],
    );
    const orders = await admin.query('SELECT 1 FROM adv77_orders WHERE tag = $1', [tag]);
    return { status, error: met.get(tag) ?? '', item: rows[0], orders: orders.rowCount };
  };

  it('control: without @Idempotent(): the row stamped by the mailer', async () => {
    expect(await run('/plain', undefined, 'p1', false)).toEqual({
      status: 201,
      error: '',
      item: { name: 'renamed', updated_by: 'mailer' },
      orders: 1,
    });
  }, 30_000);

  it('control: keyed, the rename awaited inside the request: stamped by the mailer', async () => {
    expect(await run('/keyed', 'k-awaited', 'k2', true)).toEqual({
      status: 201,
      error: '',
      item: { name: 'renamed', updated_by: 'mailer' },
      orders: 1,
    });
  }, 30_000);

  it('keyed, the rename saved after the answer: stamped by the mailer', async () => {
    expect(await run('/keyed', 'k-after', 'k1', false)).toEqual({
      status: 201,
      error: '',
      item: { name: 'renamed', updated_by: 'mailer' },
      orders: 1,
    });
  }, 30_000);
});
