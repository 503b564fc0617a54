/**
 * Adversary 76: node-postgres code that LISTENs on a client of the pool and waits for a
 * notification (another system's `NOTIFY`: a payment confirmed, a job done) never hears it in
 * an `@Idempotent()` handler: it waits until its own deadline and answers that nothing came, and
 * that answer is stored and replayed for good. Without the library it hears the notification.
 *
 *   const listener = await pool.connect();
 *   try {
 *     await listener.query('LISTEN payments');
 *     const heard = new Promise((resolve) => listener.on('notification', (m) => resolve(m.payload)));
 *     await paymentService.confirm(id);                 // another system: NOTIFY payments, '<id>'
 *     const payload = await Promise.race([heard, deadline(3_000)]);
 *     return { confirmed: payload === id };
 *   } finally {
 *     listener.release();
 *   }
 *
 * Why: `pool.connect()` in the scope gives a `JoinedClient` (lib/data-layers/pool-transaction.ts),
 * an `EventEmitter` of its own that nothing on the request's connection ever emits on: the real
 * client's 'notification' events are not forwarded to it. And its `LISTEN` is not a plain read,
 * so `PoolTransaction.statement` sends it on the request's connection inside the request's
 * transaction, where PostgreSQL only starts listening when that transaction commits (after the
 * answer): the `NOTIFY` sent meanwhile is not delivered to it at all. Once the request commits,
 * that pooled connection goes on listening to 'payments' for whoever takes it next.
 *
 * Expected: docs/guides/data-layers.md: "`pool.connect()` gives a view of the request's
 * connection" and "What is not joined, and how you hear of it" lists what does not work as
 * without the library; LISTEN is not among them, and nothing is said (no error, no warning). The
 * brief's promise: "a retry gets the stored answer", here the wrong one, `confirmed: false`,
 * replayed for good.
 *
 * Control: without `@Idempotent()`: 201 `{ confirmed: true }`.
 *
 * Severity: medium (a wrong answer stored and replayed to every retry; nothing committed
 * twice). Also a session-level `LISTEN` left on a pooled connection after the commit.
 *
 * Fails now: keyed: 201 `{ confirmed: false }` (the handler's own deadline), replayed.
 *
 * Suggested fix: run `LISTEN`/`UNLISTEN` (session-level, not transactional in effect) on a
 * connection of its own for the view (as `connectionApart` does past the end) and forward its
 * 'notification' events to the view; or refuse `LISTEN` inside a request with an error that
 * says to listen on a client outside the request (`IdempotentTransaction.outside`), and list it
 * under "What is not joined".
 *
 * Fixed: a view's `LISTEN`/`UNLISTEN` runs on a connection of its own whose 'notification' and
 * 'notice' events are emitted on the view, given back after `UNLISTEN *` with it
 * (lib/data-layers/view-listener.ts); a view's connection apart forwards them too.
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { Client, type Notification, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;
/** Another system's connection: it confirms a payment with a NOTIFY. */
let notifier: Client;

type Body76 = { id: string };

async function work(pool: Pool, { id }: Body76) {
  const listener = await pool.connect();
  let timer: NodeJS.Timeout | undefined;
  try {
    await listener.query('LISTEN adv76_payments');
    const heard = new Promise<string | undefined>((resolve) =>
      listener.on('notification', (message: Notification) => resolve(message.payload)),
    );
    // The handler's own deadline for the confirmation, as such code has one.
    const deadline = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), 3_000);
    });
    await notifier.query(`SELECT pg_notify('adv76_payments', $1)`, [id]);
    const payload = await Promise.race([heard, deadline]);
    return { id, confirmed: payload === id };
  } finally {
    clearTimeout(timer);
    await listener.query('UNLISTEN adv76_payments').catch(() => undefined);
    listener.release();
  }
}

@Controller()
class PaymentsController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body76) {
    return work(this.pool, body);
  }

  @Post('plain')
  plain(@Body() body: Body76) {
    return work(this.pool, body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PaymentsController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class PaymentsModule {}

describe('adversary 76: LISTEN on a client of the pool in a keyed request', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_listen', {
      module: PaymentsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
    });
    notifier = new Client({ connectionString: fixture.database.url });
    await notifier.connect();
  }, 60_000);

  afterAll(async () => {
    await notifier?.end().catch(() => undefined);
    await fixture?.close();
  });

  const post = (path: string, key: string | undefined, body: Body76) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the notification is heard: confirmed', async () => {
    const answer = await post('/plain', undefined, { id: 'plain-1' });
    expect({ status: answer.status, body: answer.body as unknown }).toEqual({
      status: 201,
      body: { id: 'plain-1', confirmed: true },
    });
  }, 30_000);

  it('keyed: the notification is heard, and the retry replays that', async () => {
    const first = await post('/keyed', 'keyed-1', { id: 'keyed-1' });
    const retry = await post('/keyed', 'keyed-1', { id: 'keyed-1' });
    expect({
      first: { status: first.status, body: first.body as unknown },
      retry: { status: retry.status, body: retry.body as unknown },
    }).toEqual({
      first: { status: 201, body: { id: 'keyed-1', confirmed: true } },
      retry: { status: 201, body: { id: 'keyed-1', confirmed: true } },
    });
  }, 30_000);
});

/**
 * Found in review of the fix (not the reviewer's): the `LISTEN` runs on a connection of its
 * own, taken from the app's pool while the request holds one of the same pool. On a pool whose
 * every connection is held (here a pool of one), that wait had no end (node-postgres' default
 * `connectionTimeoutMillis` is none): no answer, the key held by its heartbeat for as long.
 * Bounded now by the request's `databaseTimeoutMs`, as `IdempotentTransaction.outside()`'s
 * waits are: the request rolls back, answers 503, gives its connection back, and the key is
 * free again.
 */
@Controller()
class MarkedPaymentsController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  /** A write first (the request's transaction holds the pool's one connection), then LISTEN. */
  @Post('keyed')
  @Idempotent()
  async keyed(@Body() body: Body76) {
    await this.pool.query('INSERT INTO adv76_marks (id) VALUES ($1)', [body.id]);
    return work(this.pool, body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 1_500 }),
    }),
  ],
  controllers: [MarkedPaymentsController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class FullPoolModule {}

describe('adversary 76 (review): LISTEN in a keyed request on a pool whose connections are all held', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_listen_full', {
      module: FullPoolModule,
      setup: (admin) => admin.query('CREATE TABLE adv76_marks (id text)').then(() => undefined),
      max: 1,
      usePool: (started) => {
        pool = started;
      },
    });
    notifier = new Client({ connectionString: fixture.database.url });
    await notifier.connect();
  }, 60_000);

  afterAll(async () => {
    await notifier?.end().catch(() => undefined);
    await fixture?.close();
  });

  it('answers within its deadline, never holds the key: a clear 503, then the key is free', async () => {
    const send = () =>
      request(fixture.app.getHttpServer())
        .post('/keyed')
        .set('Idempotency-Key', 'full-1')
        .send({ id: 'full-1' })
        .timeout(20_000);
    const first = await send();
    expect({ status: first.status, code: (first.body as { code?: string }).code }).toEqual({
      status: 503,
      code: 'store_unavailable',
    });
    // Not held by a worker still waiting: the retry runs (and meets the same bound).
    const retry = await send();
    expect(retry.status).toBe(503);
    const { rows } = await fixture.admin.query<{ n: string }>(
      'SELECT count(*) AS n FROM adv76_marks',
    );
    expect(Number(rows[0].n)).toBe(0);
  }, 60_000);
});
