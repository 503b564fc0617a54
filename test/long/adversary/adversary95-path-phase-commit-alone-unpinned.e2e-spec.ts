/**
 * Fixed (session of 2026-12-06 fifth): every statement the library sends on a connection taken
 * for it goes through one helper, `libraryStatement` (lib/connection/library-path.ts), which sets
 * the pinned search path in the statement's round trip: `RequestTransaction.alone()` (a phase's
 * call with no record, a job step with no statement) and `IdempotencyDatabase.query` use it; the
 * lease renewal sent with the claim's lone `COMMIT` (`commitClaimOn`, after `commitClaimAlone`)
 * is pinned in its text (`pinnedText`); the partitioned expiry sets it on its own connection.
 * Set-up corrected: the stored key's `recovery_point` once done is 'finished' (as `COMPLETE`
 * writes for every finished key), not the phase's name.
 */
/**
 * Adversary 95 (path): the fix of adversary 93 (f28c8ec: the library's statements run with the
 * search path the start-up check found) misses the fenced statements a request's transaction
 * sends ALONE, on a connection taken for them: `RequestTransaction.commitNow` when nothing was
 * begun on its connection (`!this.opening` / `!this.beginning`) sends the statement through
 * `alone()` -> `queryWithDeadline(client, config, …, { commits: true })`, with no `send`: no
 * `pinSearchPath`, no `restoreSessionState(…, libraryPath())`. That is the road of every
 * `PhaseRunner.call()` without a record (its phase's transaction has no statement: the ADVANCE
 * of its recovery point is sent alone) and of the request's answer after a phase that committed
 * the claim alone (`commitClaimAlone` clears `opening`; the handler sends nothing after the
 * call): both go to whatever schema the pooled session's path names.
 *
 * User code (the schema-per-tenant recipe of adversary 93, now documented as safe):
 *
 *   @Post('tenant') async tenantWork(@Headers('x-tenant') t) {
 *     const runner = this.dataSource.createQueryRunner(); await runner.connect();
 *     await runner.query(`SET search_path TO tenant_${t}`); …; await runner.release(); // no RESET
 *   }
 *   @Post('charge') @Idempotent() async charge(@Body() b) {
 *     const auth = await this.phases.call('psp_charged', ({ idempotencyKey }) => psp.charge(b, idempotencyKey));
 *     return { tag: b.tag, auth: auth.id };
 *   }
 *   // tenant_x: every migration run in its schema (the library's too); tenant_y: the app's only.
 *
 * Code path: lib/phases/phase-runner.service.ts `call` -> `commitClaimAlone` (opening cleared)
 * -> `PostgresClaimStore.commitPhase` (lib/claim/postgres-claim.store.ts: a new
 * `database.transaction(true)`, no statement in it) -> `RequestTransaction.commitWith` ->
 * `commitNow` (lib/transaction/request-transaction.ts) `!this.opening` branch -> `alone()`:
 * unpinned; same for the interceptor's `finishIn` of the request's answer. The claim itself
 * (`beginWithClaim`, pinned) went to public.
 *
 * Docs quote: docs/guides/getting-started.md, "Where the library's tables live": "From then on
 * every statement of the library's runs with that same path, whatever the session's path is
 * when it gets the connection … So a schema-per-tenant app may leave `SET search_path TO
 * tenant_x` on a runner it gives back to the pool without a reset: the library's claims,
 * stored answers, renewals and purges still go to the tables the start-up check found".
 *
 * Severity: high for (b) (a held key: the request whose charge ran answers 409 lease_lost, its
 * key stays 'started' in public and every retry is 409 key_in_progress until the lease runs
 * out, then the call runs again); medium for (a) (a 500 database_permanent, "nothing was
 * stored", for a request whose external call ran).
 *
 * Fails now (verified, pool of one connection, replayCacheSize 0): (b) statuses [409, 409],
 * codes ['lease_lost', 'key_in_progress'], public key {state 'started', recovery_point
 * 'start', response_code null} (the phase's ADVANCE matched no row in tenant_x's copy);
 * (a) statuses [500, 201], code 'database_permanent', the PSP called twice (same derived key).
 * Control: the same requests after the tenant's code on public: 201 twice, one charge, replay.
 *
 * Suggested fix: `alone()` (and any other statement of the library's sent on a connection
 * taken for it) pins the library's path as `IdempotencyDatabase.query` does: `send: () =>
 * runSurrounded(client, config, undefined, { before: [pinSearchPath(path)] })` with
 * `this.libraryPath()`; better, route every library statement through one helper that
 * cannot be called without the pin.
 */
import { Body, Controller, Headers, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { readFileSync } from 'node:fs';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent, PhaseRunner } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/** The PSP: what it charged, outside the app's database (its own idempotency not used). */
const charged: string[] = [];
const derivedKeys: string[] = [];

@Controller()
class TenantController {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly phases: PhaseRunner,
  ) {}

  @Post('tenant')
  async tenantWork(@Headers('x-tenant') tenant?: string) {
    const runner = this.dataSource.createQueryRunner();
    await runner.connect();
    try {
      const schema = tenant && /^[a-z]+$/.test(tenant) ? `tenant_${tenant}` : 'public';
      await runner.query(`SET search_path TO ${schema}`);
      await runner.query('INSERT INTO adv95_notes (note) VALUES ($1)', ['seen']);
    } finally {
      // As the recipe does: no RESET before the connection goes back to the pool.
      await runner.release();
    }
    return { ok: true };
  }

  @Post('charge')
  @Idempotent()
  async charge(@Body() body: { tag: string }) {
    const auth = await this.phases.call('psp_charged', async ({ idempotencyKey }) => {
      charged.push(body.tag);
      derivedKeys.push(idempotencyKey);
      return { id: `ch_${body.tag}_${charged.length}` };
    });
    return { tag: body.tag, auth: auth.id };
  }
}

describe('adversary 95 path: a phase’s call commits its record and answer alone, on the session’s path', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv95_path_phase_alone', {
      controllers: [TenantController],
      // One connection: the one a tenant's code left dirty is the next request's.
      max: 1,
      idempotency: { globalKeys: true, replayCacheSize: 0 },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE public.adv95_notes (id serial PRIMARY KEY, note text NOT NULL);
          CREATE SCHEMA tenant_x;
          CREATE TABLE tenant_x.adv95_notes (id serial PRIMARY KEY, note text NOT NULL);
          CREATE SCHEMA tenant_y;
          CREATE TABLE tenant_y.adv95_notes (id serial PRIMARY KEY, note text NOT NULL);
        `);
        // tenant_x made as many apps make a tenant: every migration run in its schema.
        await admin.query('SET search_path TO tenant_x');
        await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
        await admin.query('RESET search_path');
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const server = () => app.getHttpServer() as Parameters<typeof request>[0];
  const tenantWork = (tenant?: string) => {
    const call = request(server()).post('/tenant');
    return tenant ? call.set('X-Tenant', tenant) : call;
  };
  const charge = (key: string, tag: string) =>
    request(server()).post('/charge').set('Idempotency-Key', key).send({ tag });
  const keyIn = async (schema: string, key: string) =>
    (
      await fixture.admin.query<{
        state: string;
        recovery_point: string;
        response_code: number | null;
      }>(
        `SELECT state, recovery_point, response_code FROM ${schema}.idempotency_keys WHERE key = $1`,
        [key],
      )
    ).rows;
  const chargesOf = (tag: string) => charged.filter((t) => t === tag);

  it('control: a clean connection: one charge, the retry replays it', async () => {
    expect((await tenantWork()).status).toBe(201);
    const first = await charge('adv95-c1', 'c1');
    expect((await tenantWork()).status).toBe(201);
    const again = await charge('adv95-c1', 'c1');
    expect({
      statuses: [first.status, again.status],
      bodies: [first.text, again.text],
      charges: chargesOf('c1'),
    }).toEqual({
      statuses: [201, 201],
      bodies: [first.text, first.text],
      charges: ['c1'],
    });
  }, 30_000);

  it('(b) a connection left in tenant_x (its own copy of the tables): 201 and one charge, not 409 lease_lost and a held key', async () => {
    expect((await tenantWork('x')).status).toBe(201);
    const first = await charge('adv95-b1', 'b1');
    expect((await tenantWork()).status).toBe(201);
    const again = await charge('adv95-b1', 'b1');
    expect({
      statuses: [first.status, again.status],
      codes: [first.body.code, again.body.code],
      charges: chargesOf('b1'),
      publicKey: await keyIn('public', 'adv95-b1'),
      tenantKey: await keyIn('tenant_x', 'adv95-b1'),
    }).toEqual({
      statuses: [201, 201],
      codes: [undefined, undefined],
      charges: ['b1'],
      publicKey: [{ state: 'done', recovery_point: 'finished', response_code: 201 }],
      tenantKey: [],
    });
  }, 30_000);

  it('(a) a connection left in tenant_y (none of the tables): 201, not 500 after the charge', async () => {
    expect((await tenantWork('y')).status).toBe(201);
    const first = await charge('adv95-a1', 'a1');
    expect((await tenantWork()).status).toBe(201);
    const again = await charge('adv95-a1', 'a1');
    const keys = derivedKeys.filter((_, i) => charged[i] === 'a1');
    expect({
      statuses: [first.status, again.status],
      code: first.body.code,
      // The call ran again, with the same derived key (as the design has it for a takeover).
      distinctDerivedKeys: new Set(keys).size,
    }).toEqual({ statuses: [201, 201], code: undefined, distinctDerivedKeys: 1 });
  }, 30_000);
});
