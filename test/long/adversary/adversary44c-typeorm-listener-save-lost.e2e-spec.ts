import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { EventEmitter } from 'node:events';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary 44c: round 43c's window on TypeORM. A repository `save()` of an entity that has an
 * id, run by an event listener deferred off the request's path, loses its effect for good when
 * the request commits between the save's load and its transaction.
 *
 * The app (TypeORM, the library's default seam): the handler saves an order, emits
 * `order.placed` with it, then writes an audit row and returns. A listener confirms the order:
 * `order.status = 'confirmed'; await repository.save(order)`, deferred as event buses do
 * (`@nestjs/event-emitter`'s `@OnEvent(…, { async: true })` runs it from `setImmediate`;
 * `setTimeout(…, 0)` does the same). docs/guides/data-layers.md and transactions.md: work the
 * handler left running joins the request while it is open, and once the answer committed "runs
 * on its own"; a statement of it sent while the commit is under way waits for the commit's
 * outcome and then runs.
 *
 * What happens: the listener runs while the handler awaits its audit write. TypeORM's save
 * takes its query runner then (EntityPersistExecutor: `createQueryRunner()` in the request's
 * scope, still pending, so a view of the request's runner: lazy-transaction.ts:147-160
 * `joinedRunner` → `viewOf`) and loads the entity (a SELECT, queued on the request's connection
 * behind the audit INSERT). The audit write returns, the handler answers, the library commits.
 * Only then does the save start its transaction on that view: the view still says no
 * transaction is open (depth 1), so TypeORM sends `SAVEPOINT typeorm_1`; `queryFrom` sees the
 * request ended (lazy-transaction.ts:418-419) and runs it through `apart(false, readAlone)`
 * (request-transaction.ts:752-768): alone, in autocommit, on a connection of its own, where
 * PostgreSQL refuses it (25P01 "SAVEPOINT can only be used in transaction blocks"). The save
 * rejects; the request answered 201 and committed, its retry replays 201, and the order stays
 * `placed` for ever. Deterministic: node-postgres sends the SELECT as soon as the INSERT's
 * answer arrives, and the commit begins in the microtasks that follow, before the SELECT's
 * answer. The pool seam moves such a view to a connection of its own
 * (pool-transaction.ts `connectionApart`, round 43c); TypeORM's view has no such move: its
 * `startTransaction()` after the end is never told the request is over.
 *
 * Expected: as without the library (the same listener on a plain route, or the same listener
 * a moment later): the save runs on its own once the request committed: `confirmed`.
 *
 * The same on a `@Idempotent({ oneCommit: true })` route.
 *
 * Controls (pass): the same listener 300 ms later (its runner taken after the commit settled,
 * a plain one of the DataSource's): `confirmed`; the same change at the same moment with
 * `repository.update()` (no load, no transaction of its own): `confirmed`.
 *
 * Severity: high, bordering critical (as 43c): an effect of the app's code is lost for good
 * under a 201 that is replayed, with an ordinary idiom (an async listener's `save()` of a
 * loaded entity); the stored answer is right, but nothing ever runs the confirmation again.
 */
@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  ref!: string;

  @Column({ type: 'text' })
  status!: string;
}

type When = 'immediate' | 'timeout0' | 'later' | 'update';

const failures: string[] = [];
const events = new EventEmitter();
let dataSource: DataSource;

events.on('order.placed', (order: Order, when: When) => {
  const confirm = async () => {
    const orders = dataSource.getRepository(Order);
    if (when === 'update') {
      await orders.update(order.id, { status: 'confirmed' });
      return;
    }
    order.status = 'confirmed';
    await orders.save(order);
  };
  const run = () =>
    void confirm().catch((error: unknown) => failures.push(`${order.ref}: ${String(error)}`));
  // An async listener of an event bus: off the request's path.
  if (when === 'later') setTimeout(run, 300);
  else if (when === 'timeout0') setTimeout(run, 0);
  else setImmediate(run);
});

@Controller()
class OrdersController {
  constructor(@InjectDataSource() source: DataSource) {
    dataSource = source;
  }

  @Post('orders')
  @Idempotent()
  place(@Body() body: { ref: string; when: When }) {
    return this.placeOrder(body);
  }

  /** The same on a route that claims its key in the request's own transaction. */
  @Post('orders-one')
  @Idempotent({ oneCommit: true })
  placeOneCommit(@Body() body: { ref: string; when: When }) {
    return this.placeOrder(body);
  }

  private async placeOrder(body: { ref: string; when: When }) {
    const order = await dataSource
      .getRepository(Order)
      .save({ ref: body.ref, status: 'placed' } as Order);
    events.emit('order.placed', order, body.when);
    await dataSource.query('INSERT INTO audit (note) VALUES ($1)', [`placed ${body.ref}`]);
    return { id: order.id, ref: order.ref };
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('adversary 44c: a listener’s save() whose load straddles the request’s commit', () => {
  let fixture: TypeormApp;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv44c_listener_save', {
      controllers: [OrdersController],
      entities: [Order],
      max: 4,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE orders (id serial PRIMARY KEY, ref text NOT NULL, status text NOT NULL)',
        );
        await admin.query('CREATE TABLE audit (id serial PRIMARY KEY, note text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const placeTwice = async (ref: string, when: When, route = '/orders') => {
    const call = () =>
      request(fixture.app.getHttpServer())
        .post(route)
        .set('Idempotency-Key', `key-${ref}`)
        .send({ ref, when });
    const first = await call();
    await sleep(800);
    const retry = await call();
    const { rows } = await fixture.admin.query(
      'SELECT status FROM orders WHERE ref = $1 ORDER BY id',
      [ref],
    );
    return {
      first: first.status,
      retry: retry.status,
      replayed: retry.headers['idempotent-replayed'],
      statuses: rows.map((row: { status: string }) => row.status),
      failures: failures.filter((failure) => failure.startsWith(`${ref}:`)),
    };
  };

  const confirmed = {
    first: 201,
    retry: 201,
    replayed: 'true',
    statuses: ['confirmed'],
    failures: [],
  };

  it('control: the same listener 300 ms later saves on its own: confirmed', async () => {
    expect(await placeTwice('order-later', 'later')).toEqual(confirmed);
  }, 30_000);

  it('control: repository.update() at the same moment: confirmed', async () => {
    expect(await placeTwice('order-update', 'update')).toEqual(confirmed);
  }, 30_000);

  it('the listener’s save() (setImmediate, @OnEvent async) runs once the request committed', async () => {
    expect(await placeTwice('order-immediate', 'immediate')).toEqual(confirmed);
  }, 30_000);

  it('the listener’s save() (setTimeout 0) runs once the request committed', async () => {
    expect(await placeTwice('order-timeout0', 'timeout0')).toEqual(confirmed);
  }, 30_000);

  it('control: on a oneCommit route, the same listener 300 ms later: confirmed', async () => {
    expect(await placeTwice('one-later', 'later', '/orders-one')).toEqual(confirmed);
  }, 30_000);

  it('the same on a oneCommit route: the listener’s save() runs once the request committed', async () => {
    expect(await placeTwice('one-immediate', 'immediate', '/orders-one')).toEqual(confirmed);
  }, 30_000);
});
