/**
 * Fixed (session of 2026-12-06, seventh): lib/transaction/failure.ts decides in one table
 * (`CAUGHT_FATES`) what a refusal's fate becomes once its code caught it and went on, the only
 * way anything of the request can start after it: `own` and `aborted` stay, a caught `stored`
 * one (a best-effort advisory lock) becomes `aborted`, its answer 500 `transaction_aborted`,
 * nothing committed or stored. `refusedAfter` (replacing `refusalRollsBack`) gives what a
 * phase, `call()` or `finish()` started after any refusal throws before anything of it runs:
 * the refusal again when catching it changes nothing, else the refused commit it leads to
 * (`TransactionAbortedError`: 500 `transaction_aborted`, not stored; a handler that catches that
 * and throws its own error still has that answer stored, as the `stored` fate says).
 *
 * Adversary 103 (orm): after a phase whose work caught a `stored`-fate refusal (a best-effort
 * session advisory lock) and went on, the phase is answered 500 `transaction_aborted` ("nothing
 * committed or stored"); the handler catches that around `phases.run()` and goes on, and the
 * NEXT phase ('charge') commits. The request is then answered 500 `transaction_aborted`,
 * "nothing committed or stored", again on every retry (the lock phase is refused each time),
 * while the charge of the first attempt stays committed. A client told "nothing committed"
 * that tries again with a new key charges twice.
 *
 * User code:
 *
 *   @Post() @Idempotent() async charge(@Body() b) {
 *     try {
 *       await this.phases.run('lock', async (m) => {
 *         try { await m.query('SELECT pg_advisory_lock(77)'); } catch { /* best effort *\/ }
 *         return { ok: true };
 *       });
 *     } catch { /* the lock phase is best effort *\/ }
 *     await this.phases.run('charge', (m) => m.insert(Charge, { tag: b.tag }));
 *     return this.phases.finish(async () => ({ tag: b.tag }));
 *   }
 *
 * Code path: lib/phases/phase-runner.service.ts `guard` → `request.refusedInPhase(lock
 * refusal)` and throws 500 `transaction_aborted` (lib/transaction/failure.ts `classifyAnew`:
 * a caught refusal is answered "as the request's own refused commit is ... never stored");
 * `run('charge')` → `refuseAfterRefusal` → `refusalRollsBack(SessionAdvisoryLockRefusedError)`
 * is false (fate `stored` in `REFUSAL_FATES`), so the charge phase commits; the request's
 * commit is then refused (`refusedEnd`) and answered 500 `transaction_aborted`, not stored.
 *
 * Docs quote (docs/guides/transactions.md): "a phase whose work caught a refusal and went on (a
 * session-level advisory lock) answers 500 `transaction_aborted`, nothing stored, as the
 * handler's own commit would. After a refusal answered as its own and never stored
 * (`cursor_open`, `transaction_aborted` for a concurrent save), caught around `phases.run()`,
 * no phase, `call()` (its record included) or `finish()` started after it commits"; and
 * docs/reference/problems.md `transaction_aborted`: "nothing committed or stored".
 *
 * Severity: high (an effect committed while every answer says nothing committed; the key never
 * completes, so the client's only way on is a new key, which runs the charge again).
 *
 * Fails now (verified unskipped): answers ['500 transaction_aborted', '500 transaction_aborted'],
 * charges 1 (expected 0: nothing commits past the refusal the request is answered with).
 * The same with the lock taken (and caught) in the handler itself before the charge phase
 * (problems.md: "a handler that catches it and answers anyway: 500 `transaction_aborted`"):
 * answers ['500 transaction_aborted', '500 transaction_aborted'], charges 1 (expected 0).
 * Control: without the lock phase: 201, replayed, one charge.
 *
 * Suggested fix: once a phase was answered with a never-stored failure because of a refusal
 * (its work caught a `stored`-fate refusal and went on: the phase's commit refused), treat the
 * request's refusal as rolling back (`refusalRollsBack` true, e.g. record the phase's
 * `TransactionAbortedError` as an `aborted`-fate refusal in `guard`), so `refuseAfterRefusal`
 * refuses later phases, calls and `finish()`; or refuse later phases whenever the request's
 * commit is already bound to be refused (`transaction.refusal` set and not a handler error to
 * store).
 */
import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent, PhaseRunner } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv103_lp_charges', synchronize: false })
class Charge {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Controller()
class ChargeController {
  constructor(private readonly phases: PhaseRunner) {}

  @InjectDataSource() private readonly ds!: DataSource;

  @Post('handler-lock')
  @Idempotent()
  async handlerLock(@Body() b: { tag: string }) {
    try {
      await this.ds.query('SELECT pg_advisory_lock(77)');
    } catch {
      // the lock is best effort
    }
    await this.phases.run('charge', async (m) => {
      await m.insert(Charge, { tag: b.tag });
      return { ok: true };
    });
    return this.phases.finish(async () => ({ tag: b.tag }));
  }

  @Post('charge')
  @Idempotent()
  async charge(@Body() b: { tag: string; lock: boolean }) {
    if (b.lock) {
      try {
        await this.phases.run('lock', async (m) => {
          try {
            await m.query('SELECT pg_advisory_lock(77)');
          } catch {
            // the lock is best effort
          }
          return { ok: true };
        });
      } catch {
        // the lock phase is best effort
      }
    }
    await this.phases.run('charge', async (m) => {
      await m.insert(Charge, { tag: b.tag });
      return { ok: true };
    });
    return this.phases.finish(async () => ({ tag: b.tag }));
  }
}

describe('adversary 103 orm: a phase after a caught lock phase commits while nothing is said committed', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv103_orm_lock_phase', {
      controllers: [ChargeController],
      entities: [Charge],
      imports: [TypeOrmModule.forFeature([Charge])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE public.adv103_lp_charges (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(tag: string, lock: boolean, route = 'charge') {
    const post = () =>
      request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${tag}`)
        .send({ tag, lock });
    const answers: string[] = [];
    for (const r of [await post(), await post()]) {
      answers.push(
        `${r.status} ${(r.body as { code?: string }).code ?? ''}${r.headers['idempotent-replayed'] ? ' replayed' : ''}`,
      );
    }
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM public.adv103_lp_charges WHERE tag = $1',
      [tag],
    );
    return { answers, charges: rows.length };
  }

  it('control: no lock phase: 201, replayed, one charge', async () => {
    expect(await scenario('c1', false)).toEqual({ answers: ['201 ', '201  replayed'], charges: 1 });
  }, 30_000);

  it('a lock phase refused and caught, then the charge phase: nothing commits past the refusal', async () => {
    expect(await scenario('p1', true)).toEqual({
      answers: ['500 transaction_aborted', '500 transaction_aborted'],
      charges: 0,
    });
  }, 30_000);

  it('a lock refused in the handler and caught, then the charge phase: nothing commits past the refusal', async () => {
    expect(await scenario('p2', true, 'handler-lock')).toEqual({
      answers: ['500 transaction_aborted', '500 transaction_aborted'],
      charges: 0,
    });
  }, 30_000);
});
