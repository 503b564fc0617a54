/**
 * Not fixed (session of 2026-12-06, sixth): out of time after the three adversary 98 breaks of
 * the same seam (the task put this one last, "only if time allows"). The lead below stands: the
 * claim's wait for a connection meets the guards' connections before any statement of theirs is
 * sent in the request, so the refusal could only be inferred (TypeORM's `connectedQueryRunners`
 * made outside the scope, counted when the claim's wait times out); that touches the claim's
 * deadline path, where a heuristic must not turn a real outage's 503 into a 500.
 *
 * Fixed in part (session of 2026-12-06 fifth): refused, because the library cannot place such a
 * runner's statements in the request without changing their meaning (issue 27):
 * `placeOfRunner('connected', 'open' | 'ended')` is now `refuse` (lib/transaction/
 * runner-place.ts), `carryingSession` is gone, and the runner's statements in the request throw
 * `RunnerConnectedOutsideRequestError` (lib/transaction/transaction-scope.ts
 * `refusingStatements`) while its `release()` gives its own connection back. Requests one after
 * another on the pool of two are refused clearly (500 `runner_connected_outside_request`),
 * nothing written, nothing stored, the connections given back (the new passing case below).
 *
 * Not fixed (session of 2026-12-06 fifth): the burst. Each guard takes its connection before
 * `@Idempotent()` claims the key, and the claim needs a connection of the pool too: with as many
 * requests in flight as the pool has connections, every claim waits `databaseTimeoutMs` and
 * answers 503 `store_unavailable` (nothing written, nothing stored, a retry under less load is
 * refused clearly), before the refusal can be met. Tried: the refusal alone (verified: both
 * 503). Lead: the library cannot hand the claim the guard's connection (its session is the
 * guard's); it could say so when a claim waits while runners connected outside the request hold
 * the pool (count TypeORM's `connectedQueryRunners` not yet in a scope) and answer the refusal
 * instead of the 503; the guide now tells the app to set the session inside the request, which
 * holds one connection.
 *
 * Adversary 96 (orm): the guard's request-scoped runner (`SET search_path TO tenant_acme`, the
 * case `carryingSession` was made for) keeps its own pooled connection for the whole request,
 * idle: from the handler's first statement on, its statements run in the request's transaction
 * (another connection), and its own connection is only given back at `release()`. So each
 * request holds TWO connections where the app without the library holds one (the guard's
 * runner is then the handler's connection). With requests as many as half the pool in flight,
 * every guard takes a connection, every request's transaction then waits for one that none will
 * give back, and all of them answer 503 after `databaseTimeoutMs`, nothing done; the retries
 * meet the same wall under the same load. Without the library the same burst is served.
 *
 * User code (pool of 2 here; the same at 10 with 5+ requests in flight):
 *
 *   @Injectable({ scope: Scope.REQUEST })
 *   class TenantUnitOfWork { readonly runner = this.dataSource.createQueryRunner(); ... }
 *   @Injectable() class TenantGuard implements CanActivate {
 *     async canActivate(ctx) {
 *       res.once('close', () => void this.uow.runner.release());
 *       await this.uow.runner.query(`SET search_path TO tenant_${tenant}`);
 *       return true;
 *     }
 *   }
 *   @Post() @Idempotent() @UseGuards(TenantGuard) async record(@Body() b) {
 *     try { await this.uow.runner.manager.insert(Entry, { tag: b.tag }); }
 *     finally { await this.uow.runner.release(); }
 *   }
 *
 * Code path: lib/transaction/runner-place.ts `placeOfRunner('connected','open')` =
 * 'join-with-session'; lib/transaction/runner-session.ts `carryingSession`: `own` is only read
 * (`READ_RUNNER_SESSION`) and kept until `giveBack()` at the carrier's `release()`; the
 * request's transaction connects after the guards (claim at begin), bounded by
 * `databaseTimeoutMs`.
 *
 * Docs quote: docs/guides/transactions.md: "**One request, one connection**: the handler's
 * statements share the request's connection"; "Its `release()` gives its own connection back to
 * the pool". Nothing says a guard's runner doubles what a request holds of the pool.
 *
 * Severity: medium (a wrong status under load: 503 `store_unavailable` for every request of a
 * burst the app serves without the library; no effect twice, nothing stored).
 *
 * Fails now (verified unskipped, pool max 2, two requests at once): statuses [503, 503], rows []
 * (expected [201, 201], ['t1', 't2']). Control: the same guard and handler without
 * `@Idempotent()`: [201, 201].
 *
 * Suggested fix: once the session is carried (or at the request's first statement), put it back
 * on `own` and give `own`'s connection back to the pool at once (its `release()` then only
 * releases the view); or say in the guide that a connected runner holds a second connection for
 * the request, and size the pool for it.
 */
import {
  Body,
  type CanActivate,
  Controller,
  type ExecutionContext,
  type INestApplication,
  Inject,
  Injectable,
  Post,
  Scope,
  UseGuards,
} from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn, type QueryRunner } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv96_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Injectable({ scope: Scope.REQUEST })
class TenantUnitOfWork {
  readonly runner: QueryRunner;
  constructor(@InjectDataSource() dataSource: DataSource) {
    this.runner = dataSource.createQueryRunner();
  }
}

@Injectable()
class TenantGuard implements CanActivate {
  constructor(@Inject(TenantUnitOfWork) private readonly uow: TenantUnitOfWork) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const tenant = String(
      context.switchToHttp().getRequest<{ headers: Record<string, string> }>().headers['x-tenant'],
    );
    if (!/^[a-z]+$/.test(tenant)) return false;
    // A replay runs guards but not the handler: give the runner back when the response is done.
    context
      .switchToHttp()
      .getResponse<{ once(event: 'close', listener: () => void): unknown }>()
      .once('close', () => void this.uow.runner.release());
    await this.uow.runner.query(`SET search_path TO tenant_${tenant}`);
    return true;
  }
}

@Controller()
class LedgerController {
  constructor(@Inject(TenantUnitOfWork) private readonly uow: TenantUnitOfWork) {}

  private async record(tag: string) {
    try {
      await this.uow.runner.manager.insert(Entry, { tag });
    } finally {
      await this.uow.runner.release();
    }
    return { tag };
  }

  @Post('idempotent')
  @Idempotent()
  @UseGuards(TenantGuard)
  recordIdempotent(@Body() body: { tag: string }) {
    return this.record(body.tag);
  }

  @Post('plain')
  @UseGuards(TenantGuard)
  recordPlain(@Body() body: { tag: string }) {
    return this.record(body.tag);
  }
}

describe('adversary 96 orm: guards’ runners and the request’s transaction share a small pool', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv96_orm_guard_runners_pool', {
      controllers: [LedgerController],
      providers: [TenantUnitOfWork, TenantGuard],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 2,
      setup: async (admin) => {
        await admin.query(`
          CREATE SCHEMA tenant_acme;
          CREATE TABLE tenant_acme.adv96_entries (id serial PRIMARY KEY, tag text NOT NULL);
        `);
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  }, 60_000);

  async function scenario(route: 'idempotent' | 'plain', prefix: string) {
    const post = (n: number) =>
      request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${prefix}${n}`)
        .set('X-Tenant', 'acme')
        .timeout(15_000)
        .send({ tag: `${prefix}${n}` })
        .then(
          (response) =>
            response.status < 300
              ? response.status
              : `${response.status} ${String((response.body as { code?: unknown }).code)}`,
          (error: Error) => error.message,
        );
    const statuses = await Promise.all([post(1), post(2)]);
    const rows = (
      await fixture.admin.query<{ tag: string }>(
        `SELECT tag FROM tenant_acme.adv96_entries WHERE tag LIKE $1 ORDER BY tag`,
        [`${prefix}%`],
      )
    ).rows.map((row) => row.tag);
    return { statuses, rows };
  }

  it('control: without @Idempotent(): two requests at once on a pool of two both answer', async () => {
    expect(await scenario('plain', 'c')).toEqual({ statuses: [201, 201], rows: ['c1', 'c2'] });
  }, 30_000);

  it('@Idempotent(): one request after another on a pool of two: refused clearly, nothing written, retries the same, connections given back', async () => {
    const refused = '500 runner_connected_outside_request';
    const post = (key: string) =>
      request(app.getHttpServer())
        .post('/idempotent')
        .set('Idempotency-Key', key)
        .set('X-Tenant', 'acme')
        .timeout(15_000)
        .send({ tag: key })
        .then(
          (response) => `${response.status} ${String((response.body as { code?: unknown }).code)}`,
          (error: Error) => error.message,
        );
    const started = Date.now();
    // Four requests (twice the pool) and a retry of each: none waits for a connection.
    const statuses: string[] = [];
    for (const key of ['s1', 's2', 's3', 's4', 's1', 's2', 's3', 's4'])
      statuses.push(await post(key));
    expect(statuses).toEqual(Array.from({ length: 8 }, () => refused));
    expect(Date.now() - started).toBeLessThan(5_000);
    const rows = await fixture.admin.query(
      `SELECT tag FROM tenant_acme.adv96_entries WHERE tag LIKE 's%'`,
    );
    expect(rows.rows).toEqual([]);
  }, 30_000);

  it.skip('@Idempotent(): two requests at once on a pool of two both answer the refusal, nothing written (Not fixed (session of 2026-12-06 fifth): the claim waits for the guards’ connections, see header)', async () => {
    const refused = '500 runner_connected_outside_request';
    expect(await scenario('idempotent', 't')).toEqual({ statuses: [refused, refused], rows: [] });
  }, 30_000);
});
