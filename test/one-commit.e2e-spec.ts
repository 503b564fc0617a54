import {
  BadRequestException,
  Body,
  Controller,
  HttpException,
  Logger,
  Module,
  type PipeTransform,
  Post,
} from '@nestjs/common';
import { jest } from '@jest/globals';
import { createServer } from 'node:http';
import { type AddressInfo } from 'node:net';
import pg, { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, type PhaseContext, PhaseRunner } from '../lib/index.js';
import { CLAIM } from '../lib/claim/postgres-statements.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';

/**
 * `oneCommit`: a new key's claim commits with the handler's work and its stored answer, in one
 * transaction. Counted at the pg client (each call is one round trip): one commit per new key;
 * a duplicate that arrives while the work runs waits on the uncommitted claim and gets the
 * replay, or 409 once `claimWaitMs` is over; a handler's error is stored with its claim and
 * without its effects; a call out commits the claim alone first; the first local phase commits
 * with the claim.
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let providerCalls: string[] = [];
let externalUrl = '';

/** A pipe that refuses a body without `text`: the handler never starts. */
class RequireText implements PipeTransform {
  transform(value: { text?: unknown }) {
    if (typeof value.text !== 'string') throw new BadRequestException('text is required');
    return value;
  }
}

class NoteBody {
  text!: string;
  delayMs?: number;
  fail?: number;
}

class PhaseBody {
  text!: string;
  phaseDelayMs?: number;
  failPhase?: number;
  fallback?: boolean;
}

@Controller()
class NotesController {
  constructor(private readonly phases: PhaseRunner) {}

  @Post('notes')
  @Idempotent()
  async create(@Body() body: NoteBody) {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO notes (text) VALUES ($1) RETURNING id',
      [body.text],
    );
    if (body.delayMs) await sleep(body.delayMs);
    if (body.fail) throw new HttpException({ error: 'refused', text: body.text }, body.fail);
    return { id: rows[0].id, text: body.text };
  }

  @Post('strict')
  @Idempotent()
  async strict(@Body(RequireText) body: { text: string }) {
    await pool.query('INSERT INTO notes (text) VALUES ($1)', [body.text]);
    return { text: body.text };
  }

  @Post('phased')
  @Idempotent()
  async phased(@Body() body: NoteBody) {
    const paid = await this.phases.call('psp', async ({ idempotencyKey }) => {
      providerCalls.push(idempotencyKey);
      return { paid: true };
    });
    await pool.query('INSERT INTO notes (text) VALUES ($1)', [body.text]);
    return { ...paid, text: body.text };
  }

  @Post('calls-out')
  @Idempotent()
  async callsOut(@Body() body: NoteBody) {
    await pool.query('INSERT INTO notes (text) VALUES ($1)', [body.text]);
    // Another system called without telling the library: the claim is not committed yet.
    const answer = await fetch(`${externalUrl}/risk`);
    return { text: body.text, risk: await answer.text() };
  }

  /** A local first phase, a call out with its derived key, and the last phase. */
  @Post('first-phase')
  @Idempotent()
  async firstPhase(@Body() body: PhaseBody) {
    const noted = async (text: string) => {
      const { rows } = await pool.query<{ id: number }>(
        'INSERT INTO notes (text) VALUES ($1) RETURNING id',
        [text],
      );
      if (body.phaseDelayMs) await sleep(body.phaseDelayMs);
      if (body.failPhase) throw new HttpException({ error: 'refused' }, body.failPhase);
      return { id: rows[0].id };
    };
    let made: { id: number };
    try {
      made = await this.phases.run('note_made', () => noted(body.text));
    } catch (error) {
      if (!body.fallback) throw error;
      // Caught: the failed phase left nothing, and the claim is the request's again.
      body.failPhase = undefined;
      made = await this.phases.run('fallback_made', () => noted(`${body.text}-fallback`));
    }
    providerCalls.push(this.phases.idempotencyKey('psp')!);
    return this.phases.finish(async () => {
      await pool.query(`UPDATE notes SET text = text || '!' WHERE id = $1`, [made.id]);
      return { id: made.id, text: body.text };
    });
  }

  /** The same on a short lease: the phase outlasts it, its heartbeat renewing inside. */
  @Post('first-phase-short-lease')
  @Idempotent({ leaseMs: 600 })
  firstPhaseShortLease(@Body() body: PhaseBody) {
    return this.firstPhase(body);
  }

  /** A first phase whose work takes its context (its derived key): the claim commits first. */
  @Post('phase-with-key')
  @Idempotent()
  async phaseWithKey(@Body() body: NoteBody) {
    return this.phases.run('note_made', async (_manager, { idempotencyKey }) => {
      providerCalls.push(idempotencyKey);
      await pool.query('INSERT INTO notes (text) VALUES ($1)', [body.text]);
      return { text: body.text };
    });
  }

  /** The same through a rest parameter: its derived key is refused while the claim is not committed. */
  @Post('phase-rest-key')
  @Idempotent()
  async phaseRestKey(@Body() body: NoteBody) {
    return this.phases.run('note_made', async (...args: [unknown, PhaseContext?]) => {
      await pool.query('INSERT INTO notes (text) VALUES ($1)', [body.text]);
      providerCalls.push(args[1]!.idempotencyKey);
      return { text: body.text };
    });
  }

  @Post('derived')
  @Idempotent()
  async derived(@Body() body: NoteBody) {
    await pool.query('INSERT INTO notes (text) VALUES ($1)', [body.text]);
    return { key: this.phases.idempotencyKey('psp') };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({
        globalKeys: true,
        pool,
        oneCommit: true,
        claimWaitMs: 400,
      }),
    }),
  ],
  controllers: [NotesController],
})
class NotesModule {}

describe('oneCommit: the claim commits with the work', () => {
  let fixture: PoolApp;
  let statements: string[] = [];
  let commits = 0;
  const inTransaction = new WeakSet<pg.Client>();
  const originalQuery = pg.Client.prototype.query;

  beforeAll(async () => {
    fixture = await startPoolApp('one_commit', {
      module: NotesModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL)');
      },
    });
    const admin = fixture.admin;
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      if (this !== (admin as unknown as pg.Client)) {
        const config = args[0] as string | { text?: string; name?: string; begin?: string };
        const text = typeof config === 'string' ? config : (config.text ?? '');
        const name = typeof config === 'string' ? '' : (config.name ?? '');
        const begin = typeof config === 'string' ? undefined : config.begin;
        statements.push(begin ? `${begin}; ${text}` : text);
        if (begin) inTransaction.add(this);
        // A statement named for its COMMIT, or a text that ends with one (the claim's commit
        // alone: its lease renewal; COMMIT); a ROLLBACK TO SAVEPOINT ends nothing.
        const withCommit = name.endsWith('_commit') || /;\s*COMMIT\s*$/i.test(text);
        if (/^(BEGIN|START TRANSACTION)/i.test(text)) inTransaction.add(this);
        else if (withCommit || /^(COMMIT|ROLLBACK(?!\s+TO\b))/i.test(text)) {
          inTransaction.delete(this);
          if (withCommit || /^COMMIT/i.test(text)) commits++;
        } else if (!inTransaction.has(this)) commits++;
      }
      return (originalQuery as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof pg.Client.prototype.query;
  }, 60_000);

  afterAll(async () => {
    pg.Client.prototype.query = originalQuery;
    await fixture?.close();
  });

  beforeEach(() => {
    statements = [];
    commits = 0;
    providerCalls = [];
  });

  const server = () => fixture.app.getHttpServer();
  const post = (path: string, key: string, body: object) =>
    request(server()).post(path).set('Idempotency-Key', key).send(body);
  const rows = async (text: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM notes WHERE text = $1', [text])).rows[0]
        .count,
    );
  const keyRow = async (key: string) =>
    (
      await fixture.admin.query(
        'SELECT state, response_code FROM idempotency_keys WHERE key = $1',
        [key],
      )
    ).rows[0] as { state: string; response_code: number } | undefined;

  it('a new key costs one commit and three round trips', async () => {
    const first = await post('/notes', 'one-1', { text: 'one-1' });
    expect(first.status).toBe(201);
    expect(commits).toBe(1);
    expect(statements).toHaveLength(3);
    expect(statements[0]).toMatch(/^BEGIN.*idempotency_keys.*SAVEPOINT/s);
    const again = await post('/notes', 'one-1', { text: 'one-1' });
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
    expect(await rows('one-1')).toBe(1);
    expect(await keyRow('one-1')).toEqual({ state: 'done', response_code: 201 });
  });

  // The claim runs from a statement the session prepared (`EXECUTE`), its plan kept: a session
  // that lost it (`DEALLOCATE`, a reset) or has it though the process does not know (another
  // copy of the library on the pool) is set right in the same request, which answers as any.
  const PREPARED = 'idempotency_claim_v5_in_text';
  const hasPrepared = async (client: pg.PoolClient) =>
    (await client.query('SELECT FROM pg_prepared_statements WHERE name = $1', [PREPARED]))
      .rowCount === 1;

  it('a session that lost its prepared claim: prepared again, and the request answers', async () => {
    expect((await post('/notes', 'lost-warm', { text: 'lost warm' })).status).toBe(201);
    const clients = await Promise.all([1, 2, 3, 4].map(() => fixture.pool.connect()));
    const lost: pg.PoolClient[] = [];
    try {
      for (const client of clients) {
        if (!(await hasPrepared(client))) continue;
        await client.query(`DEALLOCATE ${PREPARED}`);
        lost.push(client);
      }
    } finally {
      // The pool hands out the client given back last first: one whose statement is gone.
      for (const client of clients.filter((c) => !lost.includes(c))) client.release();
      for (const client of lost) client.release();
    }
    expect(lost.length).toBeGreaterThan(0);
    statements = [];
    const answer = await post('/notes', 'lost-after', { text: 'lost after' });
    expect(answer.status).toBe(201);
    expect(await rows('lost after')).toBe(1);
    // It met the missing statement, rolled back and was sent again: the case was reached.
    expect(statements.filter((text) => text === 'ROLLBACK')).toHaveLength(1);
    expect((await post('/notes', 'lost-after', { text: 'lost after' })).body).toEqual(answer.body);
  });

  it('a session that has it, unknown to the process: executed, and the request answers', async () => {
    const prepare = (client: pg.PoolClient) => {
      void client.query(`PREPARE ${PREPARED} AS ${CLAIM.text}`);
    };
    fixture.pool.on('connect', prepare);
    try {
      // Every connection replaced: the new ones have it prepared before the library sees them.
      const clients = await Promise.all([1, 2, 3, 4].map(() => fixture.pool.connect()));
      for (const client of clients) client.release(true);
      statements = [];
      const answers = await Promise.all(
        [1, 2].map((i) => post('/notes', `known-${i}`, { text: `known ${i}` })),
      );
      expect(answers.map((r) => r.status)).toEqual([201, 201]);
      for (const i of [1, 2]) expect(await rows(`known ${i}`)).toBe(1);
      expect(statements.filter((text) => text === 'ROLLBACK')).toHaveLength(2);
    } finally {
      fixture.pool.off('connect', prepare);
    }
  });

  it('a duplicate during the work waits for its commit and gets the replay', async () => {
    const first = post('/notes', 'one-2', { text: 'one-2', delayMs: 150 }).then((r) => r);
    await sleep(60);
    const duplicate = await post('/notes', 'one-2', { text: 'one-2', delayMs: 150 });
    const answered = await first;
    expect(answered.status).toBe(201);
    expect(duplicate.status).toBe(201);
    expect(duplicate.headers['idempotent-replayed']).toBe('true');
    expect(duplicate.body).toEqual(answered.body);
    expect(await rows('one-2')).toBe(1);
  });

  it('a duplicate waits at most claimWaitMs, then 409 with Retry-After', async () => {
    const first = post('/notes', 'one-3', { text: 'one-3', delayMs: 1200 }).then((r) => r);
    await sleep(100);
    const began = Date.now();
    const duplicate = await post('/notes', 'one-3', { text: 'one-3', delayMs: 1200 });
    const waited = Date.now() - began;
    expect(duplicate.status).toBe(409);
    expect(duplicate.headers['retry-after']).toMatch(/^\d+$/);
    expect(waited).toBeGreaterThanOrEqual(350);
    expect((await first).status).toBe(201);
    const retry = await post('/notes', 'one-3', { text: 'one-3', delayMs: 1200 });
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(await rows('one-3')).toBe(1);
  });

  it("a handler's error is stored with its claim, without its effects, in one commit", async () => {
    const failed = await post('/notes', 'one-4', { text: 'one-4', fail: 422 });
    expect(failed.status).toBe(422);
    expect(commits).toBe(1);
    expect(await rows('one-4')).toBe(0);
    expect(await keyRow('one-4')).toEqual({ state: 'done', response_code: 422 });
    const again = await post('/notes', 'one-4', { text: 'one-4', fail: 422 });
    expect(again.status).toBe(422);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(await rows('one-4')).toBe(0);
  });

  it('a request refused before its handler leaves no key: the corrected one runs', async () => {
    const refused = await post('/strict', 'one-5', { note: 'no text' });
    expect(refused.status).toBe(400);
    expect(await keyRow('one-5')).toBeUndefined();
    const fixed = await post('/strict', 'one-5', { text: 'one-5' });
    expect(fixed.status).toBe(201);
    expect(await rows('one-5')).toBe(1);
  });

  it('a phase commits the claim alone first, so its derived key lasts', async () => {
    const first = await post('/phased', 'one-6', { text: 'one-6' });
    expect(first.status).toBe(201);
    expect(first.body).toEqual({ paid: true, text: 'one-6' });
    expect(providerCalls).toHaveLength(1);
    const claimId = (
      await fixture.admin.query('SELECT claim_id FROM idempotency_keys WHERE key = $1', ['one-6'])
    ).rows[0].claim_id as string;
    expect(providerCalls[0]).toContain(claimId);
    expect(await rows('one-6')).toBe(1);
  });

  it('a call out of a handler whose claim is uncommitted is warned about, once per route', async () => {
    const external = createServer((_req, res) => res.end('low'));
    await new Promise<void>((resolve) => external.listen(0, '127.0.0.1', resolve));
    externalUrl = `http://127.0.0.1:${(external.address() as AddressInfo).port}`;
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    try {
      const first = await post('/calls-out', 'one-8', { text: 'one-8' });
      const second = await post('/calls-out', 'one-9', { text: 'one-9' });
      expect([first.status, second.status]).toEqual([201, 201]);
      const warnings = warn.mock.calls.map(([message]) => String(message));
      expect(warnings.filter((message) => message.includes('called another system'))).toEqual([
        expect.stringContaining(
          'NotesController.callsOut called another system (http://127.0.0.1:',
        ),
      ]);
    } finally {
      warn.mockRestore();
      external.closeAllConnections();
      external.close();
    }
  });

  const claimIdOf = async (key: string) =>
    (await fixture.admin.query('SELECT claim_id FROM idempotency_keys WHERE key = $1', [key]))
      .rows[0]?.claim_id as string | undefined;

  it('the first local phase commits with the claim: two commits for claim, phase, call and answer', async () => {
    const first = await post('/first-phase', 'phase-1', { text: 'phase-1' });
    expect(first.status).toBe(201);
    expect(commits).toBe(2);
    // The claim (with BEGIN), the phase's INSERT, its recovery point with COMMIT, the last
    // phase's UPDATE (with BEGIN), the stored answer with COMMIT.
    expect(statements).toHaveLength(5);
    expect(statements[0]).toMatch(/^BEGIN.*idempotency_claim.*SAVEPOINT/s);
    expect(statements[1]).toMatch(/^INSERT INTO notes/);
    // The derived key is the committed claim's.
    expect(providerCalls).toEqual([expect.stringContaining((await claimIdOf('phase-1'))!)]);
    const again = await post('/first-phase', 'phase-1', { text: 'phase-1' });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
    expect(await rows('phase-1!')).toBe(1);
    expect(await rows('phase-1')).toBe(0);
  });

  it('a first phase that fails leaves its claim: the error is stored without the effects', async () => {
    const first = await post('/first-phase', 'phase-2', { text: 'phase-2', failPhase: 422 });
    expect(first.status).toBe(422);
    expect(commits).toBe(1);
    expect(await keyRow('phase-2')).toEqual({ state: 'done', response_code: 422 });
    expect(await rows('phase-2')).toBe(0);
    const again = await post('/first-phase', 'phase-2', { text: 'phase-2', failPhase: 422 });
    expect(again.status).toBe(422);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(providerCalls).toEqual([]);
  });

  it('a first phase that fails and is caught: the next phase commits with the claim', async () => {
    const first = await post('/first-phase', 'phase-3', {
      text: 'phase-3',
      failPhase: 409,
      fallback: true,
    });
    expect(first.status).toBe(201);
    expect(commits).toBe(2);
    expect(await rows('phase-3')).toBe(0);
    expect(await rows('phase-3-fallback!')).toBe(1);
    expect(providerCalls).toEqual([expect.stringContaining((await claimIdOf('phase-3'))!)]);
  });

  it('a duplicate during the first phase waits on the claim, then 409; one row', async () => {
    // Sent now (a supertest request goes when it is awaited or then'd).
    const body = { text: 'phase-4', phaseDelayMs: 1500 };
    const first = post('/first-phase', 'phase-4', body).then((answer) => answer);
    await sleep(300);
    const duplicate = await post('/first-phase', 'phase-4', body);
    expect(duplicate.status).toBe(409);
    expect(duplicate.headers['retry-after']).toEqual(expect.any(String));
    expect((await first).status).toBe(201);
    const after = await post('/first-phase', 'phase-4', body);
    expect(after.headers['idempotent-replayed']).toBe('true');
    expect(await rows('phase-4!')).toBe(1);
  });

  it('a first phase longer than the lease keeps its claim: renewed inside, then committed', async () => {
    const body = { text: 'phase-7', phaseDelayMs: 1800 };
    const first = post('/first-phase-short-lease', 'phase-7', body).then((answer) => answer);
    await sleep(1200);
    // Past two leases: still held (uncommitted, its session not ended by the idle bound).
    const duplicate = await post('/first-phase-short-lease', 'phase-7', body);
    expect(duplicate.status).toBe(409);
    const answer = await first;
    expect(answer.status).toBe(201);
    expect(await rows('phase-7!')).toBe(1);
    const again = await post('/first-phase-short-lease', 'phase-7', body);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(answer.body);
  });

  it('a phase whose work takes its derived key commits the claim first', async () => {
    const first = await post('/phase-with-key', 'phase-5', { text: 'phase-5' });
    expect(first.status).toBe(201);
    expect(commits).toBe(3);
    expect(providerCalls).toEqual([expect.stringContaining((await claimIdOf('phase-5'))!)]);
    expect(await rows('phase-5')).toBe(1);
  });

  it('a derived key read through a rest parameter before the claim commits is refused', async () => {
    const refused = await post('/phase-rest-key', 'phase-6', { text: 'phase-6' });
    expect(refused.status).toBe(500);
    expect(providerCalls).toEqual([]);
    expect(await rows('phase-6')).toBe(0);
  });

  it('idempotencyKey() is refused while the claim is uncommitted, and nothing stays', async () => {
    const refused = await post('/derived', 'one-7', { text: 'one-7' });
    expect(refused.status).toBe(500);
    expect(await rows('one-7')).toBe(0);
  });
});
