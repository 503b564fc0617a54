/**
 * Adversary 102 (orm): the request's refusal is the FIRST the seam met (`refuse`'s and
 * `refusedInPhase`'s `??=`), and its fate alone decides the answer. A handler that caught a
 * `stored`-fate refusal (a best-effort session advisory lock, in a phase or in the handler) and
 * went on, then met a never-stored one (`cursor_open`) and answered it with its own 409, has
 * that 409 STORED and replayed: the later `own` refusal is dropped, and the earlier one's fate
 * (`stored`: "the handler's error stored if it lets the refusal out") is applied to an error
 * that is not the refusal let out at all. Either refusal alone is answered 500, nothing stored.
 *
 * User code:
 *
 *   @Post() @Idempotent() async run(@Body() b) {
 *     try {
 *       await this.phases.run('lock', (m) => m.query('SELECT pg_advisory_lock(42)'));
 *     } catch { /* the lock is best effort *\/ }
 *     return this.phases.finish(async (m) => {
 *       try { await copyRows(m, b.tag); }            // a write per streamed row: cursor_open
 *       catch { throw new ConflictException('import conflict'); }
 *       return { tag: b.tag };
 *     });
 *   }
 *   // or the same without phases: the lock and the import in the handler itself.
 *
 * Code path: lib/transaction/request-transaction.ts `refuse` (`this.refused ??= error`) and
 * `refusedInPhase` (`this.refused ??= refusal`): the cursor refusal is not recorded;
 * lib/transaction/handler-failure.ts `onHandlerError` → `answerOfRefused(transaction.refusal)`
 * → lib/transaction/failure.ts `refusalAnswer(SessionAdvisoryLockRefusedError)` = undefined
 * (fate `stored`) → `classifyHandlerError(ConflictException)` 'final' → the 409 goes to the
 * filters; lib/transaction/commit-answer.ts `withoutEffects` reads the same first refusal and
 * stores it.
 *
 * Docs quote (docs/reference/problems.md): "The refusals `cursor_open`, ... are the answer
 * whatever the handler made of them: one it caught and answered with its own exception (a
 * 409, a plain `Error`) after the refusal still answers the refusal's 500 ... in every case
 * nothing is stored and the lease is released." And for the lock: "500 `transaction_aborted`,
 * nothing stored, when it catches them and goes on."
 *
 * Severity: high (a wrong answer stored for good: the 409 the library's own cursor refusal
 * caused is the key's answer; the retry after the fix replays it, the work never runs).
 *
 * Fails now (verified unskipped): in a phase then finish(): ['409', '409 replayed']; in the
 * handler alone: ['409', '409 replayed']; expected a 500 (`cursor_open`, or
 * `transaction_aborted`), nothing stored, both times. Controls: the cursor refusal caught and
 * answered 409 without the lock before it: ['500 cursor_open', '500 cursor_open'].
 *
 * Suggested fix: keep the request's refusal with the strongest fate, not the first: a later
 * `own` or `aborted` refusal replaces a recorded `stored` one (in `refuse` and
 * `refusedInPhase`), or `refusalAnswer` is asked of every refusal recorded; and a `stored`-fate
 * refusal caught and gone on from is answered 500 `transaction_aborted` whatever the handler
 * throws later (the error it throws is not the refusal let out).
 *
 * Fixed (session of 2026-12-06, sixth): the request keeps the refusal with the strongest fate
 * (`own` over `aborted` over `stored`; within a fate the first), by `strongerRefusal` in
 * lib/transaction/failure.ts (a pure function, table-driven in failure.spec.ts), in
 * `RequestTransaction.refuse` and `refusedInPhase`. The later `cursor_open` replaces the caught
 * lock's refusal, and the 409 is not stored: 500 `cursor_open`, nothing stored. A save that
 * failed because the seam refused its statement no longer adds a `ConcurrentSaveFailedError`
 * of its own (lib/transaction/own-persist.ts `refusedBySeam`): the seam's refusal is what it met.
 */
import { Body, ConflictException, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, type EntityManager, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent, PhaseRunner } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv102_first_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Controller()
class ImportController {
  constructor(private readonly phases: PhaseRunner) {}

  @InjectDataSource() private readonly dataSource!: DataSource;

  @Post('phase-lock-then-import')
  @Idempotent()
  async phaseLock(@Body() b: { tag: string; lock: boolean }) {
    if (b.lock) {
      try {
        await this.phases.run('lock', async (m) => {
          await m.query('SELECT pg_advisory_lock(42)');
          return { ok: true };
        });
      } catch {
        // the lock is best effort
      }
    }
    return this.phases.finish(async (m) => {
      try {
        await copyRows(m, b.tag);
      } catch {
        throw new ConflictException('import conflict');
      }
      return { tag: b.tag };
    });
  }

  @Post('handler-lock-then-import')
  @Idempotent()
  async handlerLock(@Body() b: { tag: string; lock: boolean }) {
    const m = this.dataSource.manager;
    if (b.lock) {
      try {
        await m.query('SELECT pg_advisory_lock(42)');
      } catch {
        // the lock is best effort
      }
    }
    try {
      await copyRows(m, b.tag);
    } catch {
      throw new ConflictException('import conflict');
    }
    return { tag: b.tag };
  }
}

/** A write per streamed row: refused with cursor_open. */
async function copyRows(m: EntityManager, tag: string): Promise<void> {
  const stream = await m
    .createQueryBuilder()
    .select('s.n', 'n')
    .from('(SELECT generate_series(1, 1000) AS n)', 's')
    .stream();
  for await (const row of stream as AsyncIterable<{ n: number }>) {
    await m.insert(Entry, { tag: `${tag}-${row.n}` });
  }
}

describe('adversary 102 orm: the first refusal wins, and a later never-stored one is stored', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv102_orm_first_refusal', {
      controllers: [ImportController],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE public.adv102_first_entries (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: string, tag: string, lock: boolean) {
    const post = () =>
      request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${tag}`)
        .send({ tag, lock });
    const statusOf = (r: request.Response) =>
      [
        String(r.status),
        (r.body as { code?: string }).code,
        r.headers['idempotent-replayed'] ? 'replayed' : undefined,
      ]
        .filter(Boolean)
        .join(' ');
    const first = await post();
    const again = await post();
    return [statusOf(first), statusOf(again)];
  }

  /** A 500 of the library's, not stored: the refusal's, or the refused commit's. */
  const notStored = (answers: string[]) =>
    answers.every((a) => a === '500 cursor_open' || a === '500 transaction_aborted');

  it('control: the cursor refusal caught and answered 409 in finish(), no lock before: 500 cursor_open, nothing stored', async () => {
    expect(await scenario('phase-lock-then-import', 'c1', false)).toEqual([
      '500 cursor_open',
      '500 cursor_open',
    ]);
  }, 30_000);

  it('control: the same in the handler: 500 cursor_open, nothing stored', async () => {
    expect(await scenario('handler-lock-then-import', 'c2', false)).toEqual([
      '500 cursor_open',
      '500 cursor_open',
    ]);
  }, 30_000);

  it('a lock refused in a phase and caught, then the cursor refusal answered 409: a 500, nothing stored', async () => {
    const answers = await scenario('phase-lock-then-import', 'p1', true);
    expect({ answers, notStored: notStored(answers) }).toEqual({ answers, notStored: true });
  }, 30_000);

  it('a lock refused in the handler and caught, then the cursor refusal answered 409: a 500, nothing stored', async () => {
    const answers = await scenario('handler-lock-then-import', 'p2', true);
    expect({ answers, notStored: notStored(answers) }).toEqual({ answers, notStored: true });
  }, 30_000);
});
