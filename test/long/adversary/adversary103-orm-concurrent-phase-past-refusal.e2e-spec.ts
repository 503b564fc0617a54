/**
 * Fixed (session of 2026-12-06, seventh): a phase's transaction now hands each refusal on to
 * the request's as it is met (lib/transaction/request-transaction.ts `refusalsTo`, set by
 * lib/phases/phase-runner.service.ts `refusedTo` when the phase's work starts), not when the
 * work ends. So the request knows the refusal at once: a phase, `call()` or `finish()` started
 * after it, beside the phase still running, is refused before anything of it runs
 * (`refuseAfterRefusal`), and a sibling's 409 is answered as the refusal (`onHandlerError` reads
 * the request's refusal), never stored. A phase already running when the refusal is met still
 * commits (adversary 51b). The phase beside starts when the import meets its first refusal
 * (the report's `delay(100)` made the case depend on the machine's load).
 *
 * Adversary 103 (orm): a phase STARTED after a never-stored refusal still commits, when the
 * refusal was met (and caught) inside another phase whose work is still running. Adversary
 * 102's fix (`refuseAfterRefusal`) reads only the request's refusal, and a phase's refusal
 * reaches the request only when that phase's work ENDS (`refusedTo`'s `finally` →
 * `refusedInPhase`). Two phases run side by side (a small concurrency limit, `Promise.all`): the
 * import phase meets `cursor_open` on its first row, catches it per row and goes on (it enriches
 * rows through a slow call); the audit phase, started after that refusal, commits its row and
 * its recovery point. The client is answered 500 `cursor_open` ("nothing stored, a retry after
 * the fix runs the work"), yet the audit of the refused attempt stays, and the retry skips it.
 *
 * User code:
 *
 *   @Post() @Idempotent() async run(@Body() b) {
 *     const imported = this.phases.run('import', async (m) => {
 *       let n = 0;
 *       const stream = await m.createQueryBuilder()...stream();
 *       for await (const row of stream) {
 *         try { await m.insert(Entry, { tag: `${b.tag}-${row.n}` }); n++; }  // cursor_open
 *         catch { /* a bad row is skipped *\/ }
 *       }
 *       await enrich(n);                                  // a slow call out (300 ms)
 *       return { n };
 *     });
 *     // the audit runs beside it, started a little later (a limiter's next slot)
 *     const audited = delay(100).then(() =>
 *       this.phases.run('audit', (m) => m.insert(Audit, { tag: b.tag })));
 *     const [{ n }] = await Promise.all([imported, audited]);
 *     return this.phases.finish(async () => ({ tag: b.tag, n }));
 *   }
 *
 * Code path: lib/phases/phase-runner.service.ts `run` → `refuseAfterRefusal(context)` reads
 * `context.transaction.refusal` (the request's), which does not yet hold the import phase's
 * refusal: `refusedTo` hands it on only in its `finally`, when the import's work returns; so the
 * audit phase passes, `commit` → `commitPhase` commits it. lib/transaction/request-transaction.ts
 * `refusedInPhase` marks the request later; its commit is refused and answered by
 * lib/transaction/failure.ts `refusalAnswer` (500 `cursor_open`, nothing stored).
 *
 * Docs quote (docs/guides/transactions.md): "A phase runs in a transaction of its own, but what
 * the seam refuses there is the request's: caught inside the phase's work, or let out of
 * `phases.run()` and caught around it, it is answered as in the handler ... After a refusal
 * answered as its own and never stored (`cursor_open`, ...) ..., no phase, `call()` (its record
 * included) or `finish()` started after it commits: each throws that refusal again before it
 * starts." (commit 16f43fd: "only phases started after it are refused").
 *
 * Severity: high (an external call made and recorded past the refusal; a wrong answer stored
 * for good; as adversary 102's: the refused attempt's audit row is committed while the
 * client is told nothing was stored; the retry after the fix skips 'audit', so it says what the
 * refused attempt did, for good).
 *
 * Fails now (verified unskipped): first answer 500 cursor_open, and the audit table holds the
 * refused attempt's row (expected none: the audit phase started after the refusal).
 * The same with `phases.call('notify', …)` in place of the audit phase: 500 cursor_open, yet the
 * partner received the call (['p2 <claim>:notify'], expected none), and its record committed, so
 * the retry never calls again.
 * And the answer: a 'check' phase beside the import that throws a ConflictException 100 ms after
 * the import met its refusal (`Promise.all` rejects at once, the import still running): the 409
 * is STORED and replayed (['409', '409 replayed']), where the docs make the refusal the answer
 * whatever the handler made of it (500 cursor_open, nothing stored): `onHandlerError` asks
 * `transaction.refusal`, which the import phase has not handed on yet.
 * Control: the same phases one after the other (the audit started once the import returned):
 * 500 cursor_open, and the audit phase is refused, nothing committed.
 *
 * Suggested fix: hand a phase's refusal on to the request as it is met (in `refuse` of a
 * phase's transaction, or by `refusedTo` watching the phase's transaction), not when its work
 * ends; or check every running phase's refusal in `refuseAfterRefusal` (the request keeps its
 * phases' transactions while they run).
 */
import { setTimeout as delay } from 'node:timers/promises';
import { Body, ConflictException, Controller, type INestApplication, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, type EntityManager, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent, PhaseRunner } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv103_cp_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Entity({ name: 'adv103_cp_audit', synchronize: false })
class Audit {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

/** The partner's side of `phases.call('notify', …)`: every call it received. */
const notifications: string[] = [];

@Controller()
class ImportController {
  constructor(private readonly phases: PhaseRunner) {}

  @Post('side-by-side')
  @Idempotent()
  async sideBySide(@Body() b: { tag: string }) {
    const refused = firstRefusal();
    const imported = this.phases.run('import', (m) => importRows(m, b.tag, refused.met));
    const audited = refused.seen.then(() =>
      this.phases.run('audit', async (m) => {
        await m.insert(Audit, { tag: b.tag });
        return { ok: true };
      }),
    );
    const [{ n }] = await Promise.all([imported, audited]);
    return this.phases.finish(async () => ({ tag: b.tag, n }));
  }

  @Post('side-by-side-call')
  @Idempotent()
  async sideBySideCall(@Body() b: { tag: string }) {
    const refused = firstRefusal();
    const imported = this.phases.run('import', (m) => importRows(m, b.tag, refused.met));
    const notified = refused.seen.then(() =>
      this.phases.call('notify', async ({ idempotencyKey }) => {
        notifications.push(`${b.tag} ${idempotencyKey}`);
        return { sent: true };
      }),
    );
    const [{ n }] = await Promise.all([imported, notified]);
    return this.phases.finish(async () => ({ tag: b.tag, n }));
  }

  @Post('side-by-side-conflict')
  @Idempotent()
  async sideBySideConflict(@Body() b: { tag: string }) {
    const refused = firstRefusal();
    const imported = this.phases.run('import', (m) => importRows(m, b.tag, refused.met));
    const checked = refused.seen.then(() =>
      this.phases.run('check', async () => {
        throw new ConflictException('quota reached');
      }),
    );
    const [{ n }] = await Promise.all([imported, checked]);
    return this.phases.finish(async () => ({ tag: b.tag, n }));
  }

  @Post('one-after-the-other')
  @Idempotent()
  async oneAfterTheOther(@Body() b: { tag: string }) {
    const { n } = await this.phases.run('import', (m) => importRows(m, b.tag));
    await this.phases.run('audit', async (m) => {
      await m.insert(Audit, { tag: b.tag });
      return { ok: true };
    });
    return this.phases.finish(async () => ({ tag: b.tag, n }));
  }
}

/**
 * The moment the import meets its first refusal: the phase beside it starts then, not after a
 * fixed delay (a loaded machine may stream the first row later than any delay chosen).
 */
function firstRefusal(): { seen: Promise<void>; met: () => void } {
  let met!: () => void;
  const seen = new Promise<void>((resolve) => (met = resolve));
  return { seen, met };
}

/** A write per streamed row (refused: cursor_open), each caught; then a slow call out. */
async function importRows(
  m: EntityManager,
  tag: string,
  refused: () => void = () => undefined,
): Promise<{ n: number }> {
  let n = 0;
  const stream = await m
    .createQueryBuilder()
    .select('s.n', 'n')
    .from('(SELECT generate_series(1, 1000) AS n)', 's')
    .stream();
  for await (const row of stream as AsyncIterable<{ n: number }>) {
    try {
      await m.insert(Entry, { tag: `${tag}-${row.n}` });
      n++;
    } catch {
      // a bad row is skipped
      refused();
    }
  }
  await delay(300); // enrich: a slow call out
  return { n };
}

describe('adversary 103 orm: a phase started beside a phase that met a refusal commits', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv103_orm_concurrent_phase', {
      controllers: [ImportController],
      entities: [Entry, Audit],
      imports: [TypeOrmModule.forFeature([Entry, Audit])],
      max: 8,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE public.adv103_cp_entries (id serial PRIMARY KEY, tag text NOT NULL)',
        );
        await admin.query(
          'CREATE TABLE public.adv103_cp_audit (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: string, tag: string) {
    const r = await request(app.getHttpServer())
      .post(`/${route}`)
      .set('Idempotency-Key', `key-${tag}`)
      .send({ tag });
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM public.adv103_cp_audit WHERE tag = $1',
      [tag],
    );
    return { answer: `${r.status} ${(r.body as { code?: string }).code}`, audit: rows.length };
  }

  it('control: the audit phase started after the import phase returned is refused: 500 cursor_open, no audit row', async () => {
    expect(await scenario('one-after-the-other', 'c1')).toEqual({
      answer: '500 cursor_open',
      audit: 0,
    });
  }, 30_000);

  it('the audit phase started after the refusal, beside the import phase still running: nothing committed', async () => {
    expect(await scenario('side-by-side', 'p1')).toEqual({
      answer: '500 cursor_open',
      audit: 0,
    });
  }, 30_000);

  it('a call() started after the refusal, beside the import phase still running, is not made', async () => {
    notifications.length = 0;
    const { answer } = await scenario('side-by-side-call', 'p2');
    expect({ answer, notifications }).toEqual({ answer: '500 cursor_open', notifications: [] });
  }, 30_000);

  it('a check phase that throws 409 after the refusal (Promise.all rejects at once): the refusal is the answer, nothing stored', async () => {
    const post = () =>
      request(app.getHttpServer())
        .post('/side-by-side-conflict')
        .set('Idempotency-Key', 'key-p3')
        .send({ tag: 'p3' });
    const first = await post();
    await delay(500);
    const again = await post();
    const answers = [first, again].map(
      (r) =>
        `${r.status} ${(r.body as { code?: string }).code ?? ''}${r.headers['idempotent-replayed'] ? ' replayed' : ''}`,
    );
    expect(answers).toEqual(['500 cursor_open', '500 cursor_open']);
  }, 30_000);
});
