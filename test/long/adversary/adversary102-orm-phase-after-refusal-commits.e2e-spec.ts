/**
 * Adversary 102 (orm): a request the seam refused in one phase goes on to commit the NEXT phase.
 * `refusedInPhase` makes the refusal the request's ("the request cannot commit past it"), and
 * the request is answered 500 `cursor_open`, "rolled back, nothing stored, so a retry after the
 * fix runs the work"; but a `phases.run()` started after the refusal (the handler caught the
 * phase's error and went on, as code written for a best-effort step does) still commits its
 * effects and its recovery point. The retry after the fix skips that phase, keeping what it
 * committed from the refused attempt; in the handler (no phases) the same code rolls back.
 *
 * User code:
 *
 *   @Post() @Idempotent() async run(@Body() b) {
 *     let imported = 0;
 *     try {
 *       imported = (await this.phases.run('import', async (m) => {
 *         const stream = await m.createQueryBuilder()...stream();
 *         for await (const row of stream) await m.insert(Entry, ...);   // refused: cursor_open
 *         return { n: 1000 };
 *       })).n;
 *     } catch { imported = 0; }                                          // import is best effort
 *     await this.phases.run('audit', (m) => m.insert(Audit, { tag, imported }));
 *     return this.phases.finish(async () => ({ tag, imported }));
 *   }
 *
 * Code path: lib/phases/phase-runner.service.ts `run` (no check of `transaction.refusal`
 * before it starts a phase; only `PhaseOrderError` for a begun transaction) → `commit` →
 * lib/claim/postgres-claim.store.ts `commitPhase` commits the 'audit' phase's transaction (a
 * transaction of its own, not refused) with its recovery point; `refusedInPhase` only marks
 * the request's, whose own commit then is refused (lib/transaction/request-transaction.ts
 * `refusedEnd`) and answered by `refusalAnswer` (lib/transaction/failure.ts).
 *
 * Docs quote (docs/guides/transactions.md): "A phase runs in a transaction of its own, but what
 * the seam refuses there is the request's: caught inside the phase's work, or let out of
 * `phases.run()` and caught around it, it is answered as in the handler"; and (docs/reference/
 * problems.md) "in every case nothing is stored and the lease is released" / "never stored, so
 * a retry after the fix runs the work". lib/transaction/request-transaction.ts
 * `refusedInPhase`: "the request cannot commit past it".
 *
 * Severity: high (data in the wrong place: the 'audit' row of the refused attempt (imported: 0)
 * is committed while the client is told the request rolled back; the retry after the fix
 * answers 201 { imported: 1000 } and never runs 'audit' again, so the audit says 0 for good).
 *
 * Fails now (verified unskipped): first answer 500 cursor_open, yet the audit table holds
 * [{ imported: 0 }] (expected none); after the fix the retry answers 201 { imported: 1000 } and the
 * audit table is still [{ imported: 0 }] (expected [{ imported: 1000 }]).
 * Control: the same route without the refusal: 201, audit [{ imported: 1000 }]; the same code in
 * the handler without phases rolls the audit row back.
 *
 * Suggested fix: once the request carries a refusal (`transaction.refusal`, a phase's
 * included), refuse every later `phases.run()` / `call()` before anything of it runs (throw the
 * refusal's answer, as `refusalAnswer` gives it), or let the phase's commit be refused by the
 * request's refusal (`commitPhase` rolls back when `request.refusal` is set), so nothing
 * commits past a refusal.
 *
 * Fixed (session of 2026-12-06, sixth): once the request carries a refusal it is answered with
 * and never stored (`refusalRollsBack` in lib/transaction/failure.ts: fate `own` or `aborted`),
 * `PhaseRunner` refuses every later `run()`, `call()` (its call and record) and `finish()`
 * before anything of it runs, throwing that refusal again (`refuseAfterRefusal` in
 * lib/phases/phase-runner.service.ts). Nothing started after it commits (a phase already
 * running when a write beside it is refused still commits, as adversary 51b requires); the answer stays the refusal's (500 `cursor_open`), and the retry after the fix runs
 * 'audit'. Jobs run their phases through the same `PhaseRunner`, so the same holds for them.
 */
import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, type EntityManager, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent, PhaseRunner } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv102_after_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Entity({ name: 'adv102_after_audit', synchronize: false })
class Audit {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;

  @Column({ type: 'integer' })
  imported!: number;
}

/** The bug the operator fixes between the attempts: a write per streamed row. */
const state = { broken: true };

@Controller()
class ImportController {
  constructor(private readonly phases: PhaseRunner) {}

  @InjectDataSource() private readonly dataSource!: DataSource;

  @Post('import')
  @Idempotent()
  async importRows(@Body() b: { tag: string }) {
    let imported = 0;
    try {
      imported = (await this.phases.run('import', async (m) => ({ n: await copyRows(m, b.tag) })))
        .n;
    } catch {
      imported = 0; // the import is best effort
    }
    await this.phases.run('audit', async (m) => {
      await m.insert(Audit, { tag: b.tag, imported });
      return { ok: true };
    });
    return this.phases.finish(async () => ({ tag: b.tag, imported }));
  }

  /** The same code without phases, in the request's transaction. */
  @Post('import-in-handler')
  @Idempotent()
  async importInHandler(@Body() b: { tag: string }) {
    const m = this.dataSource.manager;
    let imported = 0;
    try {
      imported = await copyRows(m, b.tag);
    } catch {
      imported = 0;
    }
    await m.insert(Audit, { tag: b.tag, imported });
    return { tag: b.tag, imported };
  }
}

async function copyRows(m: EntityManager, tag: string): Promise<number> {
  const query = m
    .createQueryBuilder()
    .select('s.n', 'n')
    .from('(SELECT generate_series(1, 1000) AS n)', 's');
  if (!state.broken) {
    const rows = await query.getRawMany<{ n: number }>();
    await m.insert(
      Entry,
      rows.map((row) => ({ tag: `${tag}-${row.n}` })),
    );
    return rows.length;
  }
  const stream = await query.stream();
  let n = 0;
  for await (const row of stream as AsyncIterable<{ n: number }>) {
    await m.insert(Entry, { tag: `${tag}-${row.n}` });
    n++;
  }
  return n;
}

describe('adversary 102 orm: a phase started after a refused phase commits', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv102_orm_after_refusal', {
      controllers: [ImportController],
      entities: [Entry, Audit],
      imports: [TypeOrmModule.forFeature([Entry, Audit])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE public.adv102_after_entries (id serial PRIMARY KEY, tag text NOT NULL)',
        );
        await admin.query(
          'CREATE TABLE public.adv102_after_audit (id serial PRIMARY KEY, tag text NOT NULL, imported integer NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const post = (route: string, tag: string) =>
    request(app.getHttpServer())
      .post(`/${route}`)
      .set('Idempotency-Key', `key-${tag}`)
      .send({ tag });

  const audit = async (tag: string) =>
    (
      await fixture.admin.query<{ imported: number }>(
        'SELECT imported FROM adv102_after_audit WHERE tag = $1 ORDER BY id',
        [tag],
      )
    ).rows;

  const codeOf = (r: request.Response) =>
    `${r.status} ${(r.body as { code?: string }).code ?? JSON.stringify(r.body)}`;

  it('control: without the refusal, 201 and the audit says 1000', async () => {
    state.broken = false;
    const first = await post('import', 'c1');
    expect(codeOf(first)).toBe('201 {"tag":"c1","imported":1000}');
    expect(await audit('c1')).toEqual([{ imported: 1000 }]);
  }, 30_000);

  it('control: the same code in the handler: refused, its audit row rolled back', async () => {
    state.broken = true;
    const first = await post('import-in-handler', 'c2');
    expect(codeOf(first)).toBe('500 cursor_open');
    expect(await audit('c2')).toEqual([]);
  }, 30_000);

  it('a phase after a refused phase commits nothing; the retry after the fix runs it', async () => {
    state.broken = true;
    const first = await post('import', 'p1');
    expect(codeOf(first)).toBe('500 cursor_open');
    const afterRefused = await audit('p1');
    state.broken = false;
    const retry = await post('import', 'p1');
    expect({
      first: codeOf(first),
      afterRefused,
      retry: codeOf(retry),
      afterRetry: await audit('p1'),
    }).toEqual({
      first: '500 cursor_open',
      afterRefused: [],
      retry: '201 {"tag":"p1","imported":1000}',
      afterRetry: [{ imported: 1000 }],
    });
  }, 30_000);
});
