/**
 * Adversary 80b (orm): a transactional outbox whose relay is kicked from TypeORM's
 * `afterTransactionCommit` (the ordinary Nest + TypeORM outbox: the row is written with the
 * entity, and once the transaction commits a relay on its own connection sends what is unsent).
 * Under `@Idempotent()` the event fires at the save's `RELEASE SAVEPOINT`, before the request's
 * COMMIT: the relay, on its own connection, reads the outbox before the row is committed, finds
 * nothing, and the message for a committed order is never sent (lost until something else
 * kicks the relay). Without the library: the same code sends it once.
 *
 *   @EventSubscriber() class Outbox implements EntitySubscriberInterface<Order> {
 *     listenTo() { return Order; }
 *     async afterInsert(e) { await e.manager.insert(OutboxMessage, { tag: e.entity.tag }); kick = true; }
 *     async afterTransactionCommit() { if (kick) { kick = false; await relay.drain(); } }
 *   }
 *   // relay.drain(), its own pg connection (a worker's):
 *   //   UPDATE adv80b_outbox SET sent = true WHERE NOT sent RETURNING tag  -> publish each
 *   // handler
 *   @Post() @Idempotent() create(@Body() b) { return this.orders.save({ tag: b.tag }); }
 *
 * Why: lib/data-layers/lazy-transaction.ts, `ensureRunner` / `asOwner`: a `save()` outside any
 * nested transaction opens its own (a savepoint, docs: "outside any nested transaction opens its
 * own, as without the library"), and TypeORM's commit of it (`commitFrom` → `asOwner(from,
 * commit, …)`) broadcasts `AfterTransactionCommit` right after `RELEASE SAVEPOINT typeorm_1`,
 * while the request's transaction (BEGIN … COMMIT, `RequestTransaction`) is still open. No
 * transaction event is ever broadcast for the request's own COMMIT: the only "commit" the
 * subscriber is told of is one that made nothing durable.
 *
 * Docs it contradicts (docs/guides/transactions.md, "One request, one connection"): the
 * subscribers of a commit "run then, as TypeORM's commit runs them (an event published after
 * commit is out when `transaction()` resolves)", and "Nothing in the handler changes"
 * (the guide's opening). Nothing in the README or the guides says that `afterTransactionCommit`
 * now means "released a savepoint of a transaction that may still roll back", nor names a hook
 * that runs after the request's COMMIT for such a relay.
 *
 * Severity: medium (an effect lost: a committed order's outbox message is never relayed by the
 * event-driven relay, on every keyed request; silent: 201 answered and replayed).
 *
 * Fails now: the keyed case receives `{ status: 201, published: [], unsent: ['k1'] }` where
 * `{ status: 201, published: ['k1'], unsent: [] }` is expected (the control without
 * `@Idempotent()` gets the latter).
 *
 * Suggested fix: broadcast the `afterTransactionCommit` of a request's nested transactions
 * (and of a save's own) after the request's COMMIT, in order, on the request's runner (as
 * the library already runs work left past the end "on its own"); or, at the least, document
 * that these events fire at the savepoint's RELEASE, before anything is durable, and name the
 * hook (an after-commit callback of the library's) a relay or publisher must use instead.
 *
 * Fixed: `afterTransactionCommit` of the request's nested commits is told after the request's
 * COMMIT, before its answer goes, and only if it committed (lib/data-layers/after-request-commit.ts
 * `AfterRequestCommit`, wired in `LazyTransaction.asOwner` and `commitWith`/`commitPlain`);
 * the rule is in docs/guides/transactions.md ("TypeORM's transaction events mean what they say").
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import {
  Column,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  type InsertEvent,
  PrimaryGeneratedColumn,
  Repository,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv80b_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Entity({ name: 'adv80b_outbox', synchronize: false })
class OutboxMessage {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;

  @Column({ type: 'boolean', default: false })
  sent!: boolean;
}

/** What the relay published (a broker, in the app). */
const published: string[] = [];
/** The relay's own connection (a worker's pool in the app). */
let relayClient: Client | undefined;
let kick = false;

async function drain(): Promise<void> {
  const { rows } = await relayClient!.query<{ tag: string }>(
    'UPDATE adv80b_outbox SET sent = true WHERE NOT sent RETURNING tag',
  );
  for (const row of rows) published.push(row.tag);
}

@EventSubscriber()
class OutboxSubscriber implements EntitySubscriberInterface<Order> {
  listenTo() {
    return Order;
  }

  async afterInsert(event: InsertEvent<Order>) {
    await event.manager.insert(OutboxMessage, { tag: event.entity.tag });
    kick = true;
  }

  async afterTransactionCommit() {
    if (!kick) return;
    kick = false;
    await drain();
  }
}

@Injectable()
class OrderService {
  constructor(@InjectRepository(Order) private readonly orders: Repository<Order>) {}

  async create(tag: string) {
    const order = await this.orders.save({ tag });
    return { id: order.id, tag: order.tag };
  }
}

@Controller()
class OrderController {
  constructor(private readonly service: OrderService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: { tag: string }) {
    return this.service.create(body.tag);
  }

  @Post('plain')
  plain(@Body() body: { tag: string }) {
    return this.service.create(body.tag);
  }
}

describe('adversary 80b: TypeORM, an outbox relay kicked from afterTransactionCommit', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv80b_orm_outbox_relay', {
      controllers: [OrderController],
      providers: [OrderService],
      entities: [Order, OutboxMessage],
      subscribers: [OutboxSubscriber],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      setup: async (admin) => {
        await admin.query('CREATE TABLE adv80b_orders (id serial PRIMARY KEY, tag text NOT NULL)');
        await admin.query(
          'CREATE TABLE adv80b_outbox (id serial PRIMARY KEY, tag text NOT NULL, ' +
            'sent boolean NOT NULL DEFAULT false)',
        );
      },
    });
    ({ app } = fixture);
    relayClient = new Client({ connectionString: fixture.database.url });
    await relayClient.connect();
  }, 60_000);

  afterAll(async () => {
    await relayClient?.end();
    await fixture?.close();
  });

  const outcome = async (path: string, key: string | undefined, tag: string) => {
    published.length = 0;
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    const answer = await call.send({ tag });
    const unsent = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv80b_outbox WHERE NOT sent AND tag = $1',
      [tag],
    );
    return {
      status: answer.status,
      published: [...published],
      unsent: unsent.rows.map((row) => row.tag),
    };
  };

  it('control: without @Idempotent(): the order committed, its message relayed once', async () => {
    expect(await outcome('/plain', undefined, 'p1')).toEqual({
      status: 201,
      published: ['p1'],
      unsent: [],
    });
  }, 30_000);

  it('keyed: the order committed, its message relayed once', async () => {
    expect(await outcome('/keyed', 'k-1', 'k1')).toEqual({
      status: 201,
      published: ['k1'],
      unsent: [],
    });
  }, 30_000);
});
