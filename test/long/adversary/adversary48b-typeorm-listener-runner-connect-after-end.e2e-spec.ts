import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { EventEmitter } from 'node:events';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary 48b: TypeORM's documented manual transaction (`const runner =
 * dataSource.createQueryRunner(); await runner.connect(); await runner.startTransaction(); try
 * { ... commitTransaction() } catch { rollbackTransaction() } finally { release() }`) in an
 * event listener, with its runner made while the request is open and `connect()` called past
 * its end, is refused with `TransactionEndedError` "the idempotent request's transaction was
 * rolled back", though the request COMMITTED (201, replayed): the listener's work is lost for
 * good. Round 44c's fix (commit 284759a) moves a view to a runner of its own only at
 * `startTransaction()`, and sends a statement alone apart; `connect()` is neither.
 *
 * App (TypeORM, the library's default seam): the handler saves an order, emits `order.placed`,
 * writes an audit row and answers. The listener (deferred as `@nestjs/event-emitter`'s
 * `@OnEvent(…, { async: true })` runs it, from `setImmediate`) ships the order: it makes its
 * query runner first (`early`), asks the carrier's API for a label (100 ms), then connects,
 * starts its transaction, marks the order `shipped` and writes an audit row, and commits.
 * What happens: `createQueryRunner()` runs while the request is open, so it gets a view of the
 * request's runner (lib/data-layers/lazy-transaction.ts:147-158 `joinedRunner` → `viewOf`). By
 * the time the carrier answered, the request has committed. `runner.connect()` on the view is
 * the request runner's own `connect` (lib/data-layers/runner-view.ts:66, no `own` runner yet:
 * that is made only on `startTransaction`, runner-view.ts:36), i.e. `open()`
 * (lazy-transaction.ts:274, :582-583) → `connection()`, which rejects any call once the request
 * ended (lib/transaction/request-transaction.ts:887) with a `TransactionEndedError()` whose
 * message says the request rolled back (lib/transaction/seam-errors.ts:283). The listener
 * fails; the order stays `placed`, and a replay never runs the listener again.
 * Expected (docs/guides/transactions.md:241-248: once the answer committed, work the handler
 * left running "runs on its own ... So does a runner or client it took while the request was
 * open and uses past its end with no transaction of its own open"): the listener's transaction
 * runs on a connection of its own once the request committed: `shipped`, its audit row kept.
 * Control: the same listener with its runner made after the carrier's call (past the end: a
 * plain runner of the DataSource's): `shipped`.
 * Severity: high (an effect of the app's code lost for good under a committed, replayed 201,
 * with TypeORM's own documented idiom, and an error that says the request rolled back).
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

type When = 'early' | 'late';

const failures: string[] = [];
const events = new EventEmitter();
let dataSource: DataSource;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** TypeORM's documented manual transaction, its runner made first (`early`) or after the call. */
async function ship(order: Order, when: When): Promise<void> {
  let runner = when === 'early' ? dataSource.createQueryRunner() : undefined;
  // The carrier's API: a label for the parcel.
  await sleep(100);
  runner ??= dataSource.createQueryRunner();
  await runner.connect();
  await runner.startTransaction();
  try {
    await runner.manager.update(Order, order.id, { status: 'shipped' });
    await runner.query('INSERT INTO audit (note) VALUES ($1)', [`shipped ${order.ref}`]);
    await runner.commitTransaction();
  } catch (error) {
    await runner.rollbackTransaction();
    throw error;
  } finally {
    await runner.release();
  }
}

events.on('order.placed', (order: Order, when: When) => {
  // An async listener of an event bus (`@OnEvent(…, { async: true })`): off the request's path.
  setImmediate(() => {
    ship(order, when).catch((error: unknown) => failures.push(`${order.ref}: ${String(error)}`));
  });
});

@Controller()
class OrdersController {
  constructor(@InjectDataSource() source: DataSource) {
    dataSource = source;
  }

  @Post('orders')
  @Idempotent()
  async place(@Body() body: { ref: string; when: When }) {
    const order = await dataSource
      .getRepository(Order)
      .save({ ref: body.ref, status: 'placed' } as Order);
    events.emit('order.placed', order, body.when);
    await dataSource.query('INSERT INTO audit (note) VALUES ($1)', [`placed ${body.ref}`]);
    return { id: order.id, ref: order.ref };
  }
}

describe('adversary 48b: a listener’s query runner made before the request’s end', () => {
  let fixture: TypeormApp;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv48b_runner_connect', {
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

  const placeTwice = async (ref: string, when: When) => {
    const call = () =>
      request(fixture.app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', `key-${ref}`)
        .send({ ref, when });
    const first = await call();
    await sleep(600);
    const retry = await call();
    const { rows } = await fixture.admin.query('SELECT status FROM orders WHERE ref = $1', [ref]);
    const audit = await fixture.admin.query('SELECT 1 FROM audit WHERE note = $1', [
      `shipped ${ref}`,
    ]);
    return {
      first: first.status,
      retry: retry.status,
      replayed: retry.headers['idempotent-replayed'],
      statuses: rows.map((row: { status: string }) => row.status),
      audit: audit.rowCount,
      failures: failures.filter((failure) => failure.startsWith(`${ref}:`)),
    };
  };

  const shipped = {
    first: 201,
    retry: 201,
    replayed: 'true',
    statuses: ['shipped'],
    audit: 1,
    failures: [],
  };

  it('control: the runner made past the end ships the order on its own', async () => {
    expect(await placeTwice('order-late', 'late')).toEqual(shipped);
  }, 30_000);

  // Fails today: statuses ['placed'], audit 0, failures ['order-early: TransactionEndedError:
  // The idempotent request’s transaction was rolled back: …'].
  it('the runner made while the request was open ships the order once it committed', async () => {
    expect(await placeTwice('order-early', 'early')).toEqual(shipped);
  }, 30_000);
});
