/**
 * Fixed (session of 2026-12-06 fifth): refused, because the library cannot place such a runner's
 * statements in the request, nor in work the request left running past its end, without changing
 * their meaning (issue 27): the guard connected the runner outside every scope, so
 * `placeOfRunner('connected', 'open' | 'ended')` is now `refuse` (lib/transaction/
 * runner-place.ts; `join-with-session`, `itself-after-end` and `carryingSession` are gone), and
 * its statements there throw `RunnerConnectedOutsideRequestError` (lib/transaction/
 * transaction-scope.ts `refusingStatements`). Here the handler's first insert is refused, so it
 * never schedules its follow-up: 500 `runner_connected_outside_request`, the request rolled
 * back, no row in either schema (none written twice, none in another tenant's table), nothing
 * stored; a retry with the same key is refused the same way.
 *
 * Adversary 96 (orm): the guard points a request-scoped runner at the tenant's schema (`SET
 * search_path TO tenant_acme`); the handler writes the entry through it (so the runner is now
 * `carryingSession`'s view of the request's transaction, session carried as SET LOCAL), answers,
 * and leaves a follow-up write on the same runner running (a timer, 150 ms), which then releases
 * the runner. The request commits; the follow-up's statement goes through the carrier to the
 * view of the ENDED transaction (`runnerPastEnd`, lib/data-layers/lazy-transaction.ts), which
 * after the commit runs it apart on a connection of its own: without the session the carrier
 * carried (that was a SET LOCAL of the committed transaction, and the carry is memoized, not
 * redone on the new connection). The follow-up lands in `public.adv96_entries`: another
 * schema's (tenant's) table. Without the library both rows are in the tenant's schema (the
 * runner's own connection, its session with it); and a runner first used after the end keeps
 * its session (`itself-after-end`, adversary 90's fixed case): only one used in the handler
 * first loses it.
 *
 * User code:
 *
 *   @Injectable() class TenantGuard implements CanActivate {
 *     async canActivate(ctx) {
 *       await this.uow.runner.query(`SET search_path TO tenant_${tenant}`);
 *       return true;
 *     }
 *   }
 *   @Post() @Idempotent() @UseGuards(TenantGuard) async record(@Body() b) {
 *     const runner = this.uow.runner;
 *     await runner.manager.insert(Entry, { tag: b.tag });
 *     setTimeout(() => runner.manager.insert(Entry, { tag: `${b.tag}-follow-up` })
 *       .finally(() => runner.release()), 150);
 *     return { tag: b.tag };
 *   }
 *
 * Code path: lib/transaction/runner-session.ts `carryingSession` (`carry()` memoized; the view
 * underneath is the request's); lib/data-layers/lazy-transaction.ts `runnerPastEnd` (the view's
 * statement after a commit runs apart on a new pooled connection); lib/transaction/
 * runner-place.ts `placeOfRunner('connected','ended')` = 'itself-after-end' is never asked again
 * for a runner already standing as a carrier.
 *
 * Docs quote: docs/guides/transactions.md: "Outside the request's open transaction a connected
 * runner keeps its own connection and session, as without the library: the guard itself, and
 * work the request left running, whose statements on it wait for the outcome, run there once the
 * request committed".
 *
 * Severity: high (a write in the wrong schema/tenant, silent; the tenant's follow-up lost from
 * its own table).
 *
 * Fails now (verified unskipped): status 201, met ['written'], tenant_acme ['t1'] (expected
 * ['t1', 't1-follow-up']), public ['t1-follow-up'] (expected []). Control: the same guard and
 * handler without `@Idempotent()`: both rows in tenant_acme.
 *
 * Suggested fix: past the end, a carrier's statements go to `own` (its own connection, its
 * session still set there: 'itself-after-end') rather than to the view; or the carry is redone
 * (as SET LOCAL in the apart transaction, or session SETs on the apart connection, put back at
 * release) on the connection the view runs them on after the end.
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
    await this.uow.runner.query(`SET search_path TO tenant_${tenant}`);
    return true;
  }
}

const late: Promise<string>[] = [];

@Controller()
class LedgerController {
  constructor(@Inject(TenantUnitOfWork) private readonly uow: TenantUnitOfWork) {}

  /** Writes the entry, answers, and writes its follow-up a moment later (work left running). */
  private async record(tag: string) {
    const runner = this.uow.runner;
    await runner.manager.insert(Entry, { tag });
    late.push(
      new Promise<string>((resolve) => {
        setTimeout(() => {
          runner.manager
            .insert(Entry, { tag: `${tag}-follow-up` })
            .then(
              () => 'written',
              (error: unknown) => (error as Error).name,
            )
            .then(async (met) => {
              await runner.release();
              resolve(met);
            }, resolve);
        }, 150);
      }),
    );
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

describe('adversary 96 orm: a guard’s runner used in the handler, then by work left running after the commit', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv96_orm_guard_runner_late_write', {
      controllers: [LedgerController],
      providers: [TenantUnitOfWork, TenantGuard],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE public.adv96_entries (id serial PRIMARY KEY, tag text NOT NULL);
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

  async function scenario(route: 'idempotent' | 'plain', tag: string) {
    late.length = 0;
    const response = await request(app.getHttpServer())
      .post(`/${route}`)
      .set('Idempotency-Key', `key-${tag}`)
      .set('X-Tenant', 'acme')
      .send({ tag });
    const met = await Promise.all(late);
    const rowsOf = async (schema: string) =>
      (
        await fixture.admin.query<{ tag: string }>(
          `SELECT tag FROM ${schema}.adv96_entries WHERE tag LIKE $1 ORDER BY id`,
          [`${tag}%`],
        )
      ).rows.map((row) => row.tag);
    return {
      status: response.status,
      code: (response.body as { code?: unknown }).code,
      met,
      tenant: await rowsOf('tenant_acme'),
      public: await rowsOf('public'),
    };
  }

  it('control: without @Idempotent(): the entry and its follow-up in the tenant’s schema', async () => {
    expect(await scenario('plain', 'c1')).toEqual({
      status: 201,
      met: ['written'],
      tenant: ['c1', 'c1-follow-up'],
      public: [],
    });
  }, 30_000);

  it('@Idempotent(): refused clearly, no row in either schema, no follow-up left running, a retry refused the same', async () => {
    for (let attempt = 0; attempt < 2; attempt++) {
      expect(await scenario('idempotent', 't1')).toEqual({
        status: 500,
        code: 'runner_connected_outside_request',
        met: [],
        tenant: [],
        public: [],
      });
    }
  }, 30_000);
});
