/**
 * Fixed (session of 2026-12-06 fifth): refused, because the library cannot place such a runner's
 * statements in the request without changing their meaning (issue 27: "or the library refuses
 * what it cannot place"): the runner was connected by the guard outside every scope, so
 * `placeOfRunner('connected', 'open' | 'ended')` is now `refuse` (lib/transaction/runner-place.ts)
 * and every statement it sends in the request (its manager's insert among them) throws
 * `RunnerConnectedOutsideRequestError` (lib/transaction/transaction-scope.ts
 * `refusingStatements`): the request rolls back and answers 500
 * `runner_connected_outside_request`, nothing stored, the key given back; the message says to set
 * the tenant inside the request with `set_config(…, true)` or connect the runner in the handler.
 * Its `release()` still gives the guard's connection back. The test now asserts: no row written
 * under any tenant, each request refused clearly, the pool (max 3) not starved over four
 * requests, and a retry with the same key refused the same way (no key held, nothing stored).
 *
 * Adversary 96 (orm): a guard puts the tenant in a custom setting on a request-scoped runner
 * (the row-level-security recipe: `set_config('app.tenant', $1, false)`, policies and column
 * defaults reading `current_setting('app.tenant', true)`); the handler writes through that runner.
 * Without the library the row is written on the runner's own connection, where the guard just set
 * the tenant, so it is always that request's tenant. With `@Idempotent()` the runner is
 * `join-with-session`: its insert runs in the request's transaction on ANOTHER pooled connection,
 * and the custom setting is not carried, so the row takes whatever `app.tenant` that pooled
 * connection was left with by an earlier request's guard: another tenant's. No error, 201 stored
 * and replayed. The guide names the setting as not carried, but what the app gets is not a
 * refusal: a silent write under the wrong tenant (an RLS `WITH CHECK` passes, since the policy
 * reads the same wrong value).
 *
 * User code:
 *
 *   @Injectable({ scope: Scope.REQUEST })
 *   class TenantUnitOfWork { readonly runner = this.dataSource.createQueryRunner(); ... }
 *   @Injectable() class TenantGuard implements CanActivate {
 *     async canActivate(ctx) {
 *       res.once('close', () => void this.uow.runner.release());
 *       await this.uow.runner.query(`SELECT set_config('app.tenant', $1, false)`, [tenant]);
 *       return true;
 *     }
 *   }
 *   @Post() @Idempotent() @UseGuards(TenantGuard) async record(@Body() b) {
 *     try { await this.uow.runner.manager.insert(Note, { tag: b.tag }); }
 *     finally { await this.uow.runner.release(); }
 *   }
 *   -- CREATE TABLE adv96_notes (..., tenant text DEFAULT current_setting('app.tenant', true))
 *
 * Code path: lib/transaction/runner-place.ts `placeOfRunner('connected', 'open')` →
 * 'join-with-session'; lib/transaction/runner-session.ts `carryingSession`:
 * `READ_RUNNER_SESSION` reads session authorization, role and `pg_settings` source='session'
 * only (placeholders are not listed), so `app.tenant` is never carried; the insert runs on the
 * request's connection (lib/data-layers/lazy-transaction.ts view), whose session `app.tenant` is
 * what a previous guard left on it; `RESET_RUNNER_SESSION` only puts back what was carried, so
 * the guard's own connection goes back to the pool with its tenant still set, ready for the next
 * request's transaction to pick up.
 *
 * Docs quote: docs/guides/transactions.md: "A runner already connected (a runner a guard read
 * through, or pointed at the tenant's schema with `SET search_path`) joins too, and takes its
 * session with it ... so its writes land where its code pointed them"; "Custom settings (`SET
 * app.tenant = …`) are listed nowhere by PostgreSQL and are not carried: set them through the
 * runner inside the handler". Nothing says the write then lands under another tenant.
 *
 * Severity: high (a write in the wrong tenant, stored as the answer and replayed; silent).
 *
 * Fails now (verified unskipped, pool max 3, four sequential requests acme/globex/acme/globex):
 * rows ['t1-acme:null', 't2-globex:acme', 't3-acme:globex', 't4-globex:acme'], all statuses 201
 * (expected each row under its own tenant). Control (the same guard and handler without
 * `@Idempotent()`): each row under its own tenant.
 *
 * Suggested fix: note the names a runner's own statements set for the session outside the scope
 * (`SET name`, `set_config(name, …, false)`: sql-parse already reads `set_config` texts for
 * nested transactions) and carry those too (`current_setting(name, true)` read from its own
 * connection); or, where the runner's session was set by a statement the library cannot read
 * (any `SET`/`set_config` of a name with a dot), refuse to join (an error naming the custom
 * setting) rather than write silently on a connection with another tenant's value. At least:
 * give the runner's connection back with such names reset (`RESET ALL`-like `DISCARD ALL` is
 * too wide), and say in the guide that the write takes the pooled connection's value.
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

@Entity({ name: 'adv96_notes', synchronize: false })
class Note {
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
    // The row-level-security recipe: the tenant in a custom setting its policies read.
    await this.uow.runner.query(`SELECT set_config('app.tenant', $1, false)`, [tenant]);
    return true;
  }
}

@Controller()
class NotesController {
  constructor(@Inject(TenantUnitOfWork) private readonly uow: TenantUnitOfWork) {}

  private async record(tag: string) {
    try {
      await this.uow.runner.manager.insert(Note, { tag });
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

describe('adversary 96 orm: a guard sets the tenant (a custom setting) on a request-scoped runner', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv96_orm_guard_custom_setting', {
      controllers: [NotesController],
      providers: [TenantUnitOfWork, TenantGuard],
      entities: [Note],
      imports: [TypeOrmModule.forFeature([Note])],
      max: 3,
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv96_notes (
            id serial PRIMARY KEY,
            tag text NOT NULL,
            tenant text DEFAULT current_setting('app.tenant', true)
          );
        `);
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'idempotent' | 'plain', prefix: string) {
    const statuses: number[] = [];
    const codes: unknown[] = [];
    const messages: string[] = [];
    for (const [tenant, n] of [
      ['acme', 1],
      ['globex', 2],
      ['acme', 3],
      ['globex', 4],
    ] as const) {
      const response = await request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${prefix}${n}`)
        .set('X-Tenant', tenant)
        .send({ tag: `${prefix}${n}-${tenant}` });
      statuses.push(response.status);
      const body = response.body as { code?: unknown; detail?: unknown; message?: unknown };
      codes.push(body.code);
      messages.push(String(body.detail ?? body.message ?? ''));
    }
    const rows = (
      await fixture.admin.query<{ tag: string; tenant: string | null }>(
        `SELECT tag, tenant FROM adv96_notes WHERE tag LIKE $1 ORDER BY id`,
        [`${prefix}%`],
      )
    ).rows;
    return {
      statuses,
      codes,
      messages,
      rows: rows.map((row) => `${row.tag}:${String(row.tenant)}`),
    };
  }

  it('control: without @Idempotent(): each row under its own tenant', async () => {
    expect(await scenario('plain', 'c')).toMatchObject({
      statuses: [201, 201, 201, 201],
      rows: ['c1-acme:acme', 'c2-globex:globex', 'c3-acme:acme', 'c4-globex:globex'],
    });
  }, 30_000);

  it('@Idempotent(): refused clearly, no row under any tenant, the pool not starved, a retry refused the same', async () => {
    const refused = Array.from({ length: 4 }, () => 'runner_connected_outside_request');
    const first = await scenario('idempotent', 't');
    expect(first).toMatchObject({ statuses: [500, 500, 500, 500], codes: refused, rows: [] });
    for (const message of first.messages) expect(message).toMatch(/set_config\(…, true\)/);
    // The same keys again: nothing was stored and no key is held, so each runs and is refused.
    expect(await scenario('idempotent', 't')).toMatchObject({
      statuses: [500, 500, 500, 500],
      codes: refused,
      rows: [],
    });
  }, 30_000);
});
