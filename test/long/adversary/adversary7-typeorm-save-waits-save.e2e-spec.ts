import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { AfterInsert, Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 7: 3a0fb9f runs the saves of one request one after another (a queue per
 * request; a save inside a save runs at once, by AsyncLocalStorage). A save whose listener
 * awaits something that another branch of the handler produces by a save of its own (the
 * order's `@AfterInsert` waits for its audit entry, written beside it) now waits for a save
 * queued behind itself: neither ends. Without the library each save has its own transaction
 * and connection: the audit entry is saved, the listener goes on, 201 with both rows. With
 * it: the request hangs (its lease renewed by the heartbeat, so every retry gets 409) until
 * the listener gives up (here after 12 s, so that the app can close; in an app, for ever).
 */
const gates = new Map<string, { opened: Promise<void>; open: () => void }>();

function gateOf(tag: string) {
  let gate = gates.get(tag);
  if (!gate) {
    let open!: () => void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    gate = { opened, open };
    gates.set(tag, gate);
  }
  return gate;
}

@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;

  /** Waits for the order's audit entry, written by the handler beside this save. */
  @AfterInsert()
  async audited() {
    if (!this.tag.endsWith('-order')) return;
    const timedOut = new Promise<never>((_resolve, reject) =>
      setTimeout(() => reject(new Error('the audit entry never came')), 12_000).unref(),
    );
    await Promise.race([gateOf(this.tag.replace(/-order$/, '')).opened, timedOut]);
  }
}

@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async placeAudited(tag: string) {
    const repository = this.dataSource.getRepository(Order);
    const audit = async () => {
      await repository.save(repository.create({ tag: `${tag}-audit` }));
      gateOf(tag).open();
    };
    await Promise.all([repository.save(repository.create({ tag: `${tag}-order` })), audit()]);
    return { placed: tag };
  }

  @Post('orders')
  @Idempotent()
  idempotent(@Body() body: { tag: string }) {
    return this.placeAudited(body.tag);
  }

  @Post('plain/orders')
  plain(@Body() body: { tag: string }) {
    return this.placeAudited(body.tag);
  }
}

describe('adversary 7: TypeORM, a save whose listener awaits another save of the request', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv7_typeorm_save_waits_save', {
      controllers: [OrdersController],
      entities: [Order],
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, tag text NOT NULL)');
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(async () => {
    // Let a hung handler's listener give up, so that the app closes.
    for (const gate of gates.values()) gate.open();
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await admin.query<{ tag: string }>('SELECT tag FROM orders WHERE tag LIKE $1 ORDER BY tag', [
        `${tag}-%`,
      ])
    ).rows.map((row) => row.tag);

  const post = (path: string, tag: string, key?: string) => {
    const req = request(app.getHttpServer()).post(path).timeout(6_000);
    return (key ? req.set('Idempotency-Key', key) : req).send({ tag }).then(
      (response) => response.status,
      (error: { timeout?: number }) => (error.timeout ? 'no answer in 6 s' : String(error)),
    );
  };

  it('without the library: 201, both rows (the control)', async () => {
    expect({ status: await post('/plain/orders', 'p'), kept: await kept('p') }).toEqual({
      status: 201,
      kept: ['p-audit', 'p-order'],
    });
  });

  it('with it: as without, or a clear refusal; never a request that hangs', async () => {
    const status = await post('/orders', 'i', 'orders-i');
    // Observed: 'no answer in 6 s' (both saves wait on each other), nothing kept.
    expect({ status, kept: await kept('i') }).toEqual({
      status: 201,
      kept: ['i-audit', 'i-order'],
    });
  }, 30_000);
});
