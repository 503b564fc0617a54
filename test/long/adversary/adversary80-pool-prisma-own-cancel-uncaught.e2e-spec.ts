/**
 * Adversary 80 (pool, Prisma): a Prisma handler that cancels its own slow statement (the
 * request's backend, `pg_cancel_backend` sent from `IdempotentTransaction.outside()`) and lets
 * Prisma's error through, as most handlers do, is answered 503 `database_transient` with
 * `Retry-After: 1` on every try; the same handler catching the error answers the documented 500
 * `transaction_aborted`.
 *
 *   await prisma.doctor.create({ data: { shift, name: 'first', onCall: true } });
 *   const [{ pid }] = await prisma.$queryRaw`SELECT pg_backend_pid() AS pid`;
 *   const watchdog = setTimeout(() => IdempotentTransaction.outside(() =>
 *     prisma.$queryRaw`SELECT pg_cancel_backend(${pid})`), 300);
 *   try { await prisma.$queryRaw`SELECT 1 FROM pg_sleep(1.5)`; } finally { clearTimeout(watchdog); }
 *
 * Why: the cancel is noted (lib/data-layers/cancel-watch.ts, `OutsideScope.cancelAsked`) and
 * node-postgres' 57014 is marked as the app's own (`markAskedByApp`, a WeakSet of error
 * objects, lib/connection/connection-errors.ts). But Prisma does not keep node-postgres' error:
 * its adapter rebuilds a plain description (`DriverAdapterError.cause`), and
 * `isCancelAskedForError` walks to `prismaCause` (lib/connection/driver-errors/prisma.ts),
 * which builds a new `PrismaDriverFailure` each time: never the marked object. So
 * lib/transaction/failure.ts (`classifyHandlerError`: `isCancelAskedForError(error)` false) falls to
 * `databaseFailure`, which reads 57014 as a passing failure: 503. Caught, the commit path
 * reads the transaction's noted failure (node-postgres' own, marked: `classifyCommitError`) and
 * answers 500: the answer depends on whether the handler catches.
 *
 * Docs: docs/guides/data-layers.md, "Errors": "A statement cancelled ... by the request's own
 * code (`pg_cancel_backend` ... of the request's backend, sent through the pool's clients in
 * the request ...) is no passing failure: it ends the request's transaction, which answers 500
 * `transaction_aborted` (nothing stored; the retry meets the same cancel)", "sent in the
 * request or in its `outside()`"; docs/guides/prisma.md: "Every outcome of the transactions
 * guide's table holds for a Prisma handler".
 *
 * Severity: medium (a false "retry later" answered for ever to a request whose every retry
 * meets the same cancel, each retry running its work up to it; nothing committed twice).
 *
 * Fails now: the handler that lets Prisma's error through answers 503 `database_transient`,
 * `Retry-After: 1`, and its retry the same. Control: the same handler whose watchdog does not
 * fire answers 201 and replays it; the one that catches the error answers 500
 * `transaction_aborted` twice. (Seen too: the same with `pg_terminate_backend` let through answers
 * 503 `store_unavailable` twice; on Drizzle, whose error keeps node-postgres' as its `cause`,
 * both answer 500 `transaction_aborted`.)
 *
 * Suggested fix: mark the request (or its connection) rather than only the error object: when
 * the handler's error carries a 57014 or a connection loss and the request's connection has an
 * asked cancel answered (`noteAnswer` marked one), classify it as the app's own; or have
 * `prismaCause` keep a link to the marked error (the adapter error seen by the library's
 * view, by message and code, on the request's connection).
 *
 * Fixed: the mark is carried by the request's transaction (lib/transaction/request-transaction.ts
 * `causeOf`/`failureOf` → `markOwnCancel`): an error its code throws that answers what its noted
 * failure (`lastError`, marked by `watchCancels`) answered, a user's 57014 or a lost connection
 * (`answersSameAsked`, lib/connection/cancel-asked.ts, table in cancel-asked.spec.ts), is marked
 * as the app's own too, so `classifyHandlerError` answers 500 `transaction_aborted`.
 */
import { Body, Controller, HttpCode, Inject, Module, Post } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, IdempotentTransaction } from '../../../lib/index.js';
import { PrismaClient } from '../../examples/support/prisma-on-call/generated/client.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const PRISMA = Symbol('PRISMA');
let pool: Pool;

type Handling = 'caught' | 'uncaught' | 'idle';

@Controller('shifts')
class ShiftsController {
  constructor(@Inject(PRISMA) private readonly prisma: PrismaClient) {}

  @Post()
  @HttpCode(201)
  @Idempotent()
  async open(@Body() body: { shift: string; handling: Handling }) {
    const { prisma } = this;
    await prisma.doctor.create({ data: { shift: body.shift, name: 'first', onCall: true } });
    const [{ pid }] = await prisma.$queryRaw<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`;
    const watchdog = setTimeout(() => {
      if (body.handling === 'idle') return;
      IdempotentTransaction.outside(() => prisma.$queryRaw`SELECT pg_cancel_backend(${pid})`).catch(
        () => undefined,
      );
    }, 300);
    try {
      await prisma.$queryRaw`SELECT 1 FROM pg_sleep(${body.handling === 'idle' ? 0.05 : 1.5})`;
    } catch (error) {
      if (body.handling === 'uncaught') throw error;
    } finally {
      clearTimeout(watchdog);
    }
    return { shift: body.shift };
  }
}

describe("adversary 80 pool prisma: the request's own cancel let through as Prisma's error", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [ShiftsController],
      providers: [
        { provide: PRISMA, useFactory: () => new PrismaClient({ adapter: new PrismaPg(pool) }) },
      ],
    })
    class ShiftsModule {}
    fixture = await startPoolApp('adv80_pool_prisma_own_cancel', {
      module: ShiftsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(`CREATE TABLE doctors (
          id serial PRIMARY KEY, shift text NOT NULL, name text NOT NULL, on_call boolean NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function post(shift: string, handling: Handling) {
    const answer = await request(fixture.app.getHttpServer())
      .post('/shifts')
      .set('Idempotency-Key', `key-${shift}`)
      .send({ shift, handling })
      .timeout(30_000);
    const body = answer.body as { code?: string; shift?: string };
    return {
      status: answer.status,
      answer: body.code ?? body.shift,
      retryAfter: answer.headers['retry-after'] as string | undefined,
    };
  }

  async function twice(shift: string, handling: Handling) {
    const first = await post(shift, handling);
    const retried = await post(shift, handling);
    return { first, retried };
  }

  it('control: no cancel answers 201 and replays it; the cancel caught by the handler answers 500 transaction_aborted', async () => {
    expect({ idle: await twice('idle', 'idle'), caught: await twice('caught', 'caught') }).toEqual({
      idle: {
        first: { status: 201, answer: 'idle', retryAfter: undefined },
        retried: { status: 201, answer: 'idle', retryAfter: undefined },
      },
      caught: {
        first: { status: 500, answer: 'transaction_aborted', retryAfter: undefined },
        retried: { status: 500, answer: 'transaction_aborted', retryAfter: undefined },
      },
    });
  }, 60_000);

  it("its own cancel let through as Prisma's error is 500 transaction_aborted too", async () => {
    expect(await twice('uncaught', 'uncaught')).toEqual({
      first: { status: 500, answer: 'transaction_aborted', retryAfter: undefined },
      retried: { status: 500, answer: 'transaction_aborted', retryAfter: undefined },
    });
  }, 60_000);
});
