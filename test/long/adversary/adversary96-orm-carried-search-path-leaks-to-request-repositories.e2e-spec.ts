/**
 * Fixed (session of 2026-12-06 fifth): refused, because the library cannot place such a runner's
 * statements in the request without changing their meaning (issue 27): carried into the
 * request's transaction, the guard's search path reaches the request's other statements; kept on
 * the runner's own connection, its writes commit apart from the request. So nothing is carried
 * any more (`carryingSession` removed): `placeOfRunner('connected', 'open' | 'ended')` is `refuse`
 * (lib/transaction/runner-place.ts) and the runner's first insert throws
 * `RunnerConnectedOutsideRequestError` (lib/transaction/transaction-scope.ts
 * `refusingStatements`): 500 `runner_connected_outside_request`, the request rolled back, no
 * order and no audit row anywhere, nothing stored; a retry with the same key is refused the same.
 *
 * Adversary 96 (orm): schema-per-tenant app; a guard points a request-scoped runner at the
 * tenant's schema (`SET search_path TO tenant_acme`); the handler writes the tenant's order
 * through that runner and then the platform's audit row through an ordinary
 * `@InjectRepository(AuditEntry)` repository, whose table lives in `public` (tenant schemas are
 * cloned from one template, so `tenant_acme` has an `adv96_audit` of its own too). Without the
 * library the repository's statement runs on another pooled connection, default search path:
 * `public.adv96_audit`. With `@Idempotent()`, `carryingSession` sets the guard's search path in
 * the REQUEST'S transaction (`set_config('search_path', …, true)`), which every other statement
 * of the request shares (the repository joins it: the main road), so from the runner's first
 * statement on, the audit row (and any other unqualified statement of the request: services,
 * subscribers) lands in `tenant_acme.adv96_audit`. The platform's audit row is lost from public
 * and written into the tenant's schema; 201 stored and replayed; silent. The SET LOCAL is meant
 * for the runner's statements only, but it has no scope narrower than the whole transaction.
 *
 * User code:
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
 *   @Post() @Idempotent() @UseGuards(TenantGuard) async place(@Body() b) {
 *     try {
 *       await this.uow.runner.manager.insert(Order, { tag: b.tag });
 *       await this.audit.insert({ tag: b.tag }); // @InjectRepository(AuditEntry)
 *     } finally { await this.uow.runner.release(); }
 *   }
 *
 * Code path: lib/transaction/runner-session.ts `carryingSession` → `CARRY_RUNNER_SESSION`
 * (`set_config(name, setting, true)` on the view, i.e. the request's one connection);
 * lib/transaction/runner-place.ts `placeOfRunner('connected','open')` = 'join-with-session';
 * the repository's insert joins the same transaction (lib/transaction/transaction-scope.ts
 * `joinTransactionsOf`), where nothing puts the search path back between the runner's
 * statements and the others' (`RESTORE_SESSION_STATE`, lib/connection/session-state.ts, does it
 * for the library's own statements only).
 *
 * Docs quote: docs/guides/transactions.md: "A runner already connected ... joins too, and takes
 * its session with it: ... are set in the request's transaction with `SET LOCAL` where they
 * differ there, so its writes land where its code pointed them"; "What a statement joins is
 * decided where it is sent". Nothing says the other statements of the request take that session
 * too.
 *
 * Severity: high (a write in the wrong schema: the platform's audit row written in the tenant's
 * table, lost from public, under a stored and replayed 201).
 *
 * Fails now (verified unskipped): status 201, orders ['t1'], public.adv96_audit [] (expected
 * ['t1']), tenant_acme.adv96_audit ['t1'] (expected []). Control: the same guard and handler
 * without `@Idempotent()`: the audit row in public.
 *
 * Suggested fix: scope the carried session to the carrier's own statements: set it (SET LOCAL)
 * before each of them and put the request's values back after (or before every statement that
 * is not the carrier's, as `RESTORE_SESSION_STATE` does for the library's own); at least say in the
 * guide that the runner's session becomes the whole request's from its first statement.
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
import { InjectDataSource, InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  PrimaryGeneratedColumn,
  type QueryRunner,
  Repository,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/** The tenant's own table, in its schema. */
@Entity({ name: 'adv96_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

/** The platform's shared audit log (public), read by the operators. */
@Entity({ name: 'adv96_audit', synchronize: false })
class AuditEntry {
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
class OrdersController {
  constructor(
    @Inject(TenantUnitOfWork) private readonly uow: TenantUnitOfWork,
    @InjectRepository(AuditEntry) private readonly audit: Repository<AuditEntry>,
  ) {}

  private async place(tag: string) {
    try {
      // The tenant's order, through the runner the guard pointed at the tenant's schema.
      await this.uow.runner.manager.insert(Order, { tag });
      // The platform's audit row, through the app's ordinary repository (the DataSource's pool).
      await this.audit.insert({ tag });
    } finally {
      await this.uow.runner.release();
    }
    return { tag };
  }

  @Post('idempotent')
  @Idempotent()
  @UseGuards(TenantGuard)
  placeIdempotent(@Body() body: { tag: string }) {
    return this.place(body.tag);
  }

  @Post('plain')
  @UseGuards(TenantGuard)
  placePlain(@Body() body: { tag: string }) {
    return this.place(body.tag);
  }
}

describe('adversary 96 orm: the search path carried from a guard’s runner reaches the request’s other statements', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv96_orm_carried_search_path', {
      controllers: [OrdersController],
      providers: [TenantUnitOfWork, TenantGuard],
      entities: [Order, AuditEntry],
      imports: [TypeOrmModule.forFeature([Order, AuditEntry])],
      max: 6,
      setup: async (admin) => {
        // Tenants' schemas are made from one template, which has an audit table of its own.
        await admin.query(`
          CREATE TABLE public.adv96_audit (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE SCHEMA tenant_acme;
          CREATE TABLE tenant_acme.adv96_orders (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE TABLE tenant_acme.adv96_audit (id serial PRIMARY KEY, tag text NOT NULL);
        `);
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'idempotent' | 'plain', tag: string) {
    const response = await request(app.getHttpServer())
      .post(`/${route}`)
      .set('Idempotency-Key', `key-${tag}`)
      .set('X-Tenant', 'acme')
      .send({ tag });
    const rowsOf = async (table: string) =>
      (
        await fixture.admin.query<{ tag: string }>(`SELECT tag FROM ${table} WHERE tag = $1`, [tag])
      ).rows.map((row) => row.tag);
    return {
      status: response.status,
      code: (response.body as { code?: unknown }).code,
      orders: await rowsOf('tenant_acme.adv96_orders'),
      platformAudit: await rowsOf('public.adv96_audit'),
      tenantAudit: await rowsOf('tenant_acme.adv96_audit'),
    };
  }

  it('@Idempotent(): refused clearly, no order and no audit row anywhere, a retry refused the same', async () => {
    for (let attempt = 0; attempt < 2; attempt++) {
      expect(await scenario('idempotent', 't1')).toEqual({
        status: 500,
        code: 'runner_connected_outside_request',
        orders: [],
        platformAudit: [],
        tenantAudit: [],
      });
    }
  }, 30_000);
  it('control: without @Idempotent(): the order in the tenant’s schema, the audit row in public', async () => {
    expect(await scenario('plain', 'c1')).toEqual({
      status: 201,
      orders: ['c1'],
      platformAudit: ['c1'],
      tenantAudit: [],
    });
  }, 30_000);
});
