/**
 * Fixed (session of 2026-12-06, sixth), by refusal rather than by joining: a statement that sets
 * something for its transaction only (`SET LOCAL`, `set_config(…, true)`, read by
 * `setsForTransaction`) sent through the DataSource in the request's scope before its handler
 * started (`runnerScope` 'later') is refused (lib/transaction/transaction-scope.ts
 * `refusingSessionSetsBeforeHandler`): 500 `runner_connected_outside_request`, its cause a
 * `SessionSetBeforeHandlerError`, key given back, nothing stored. The two cases that expected the
 * row in the tenant's schema now expect that refusal (the expectation changed with the chosen
 * fix, not weakened: nothing is lost silently any more). Why not join from the first interceptor:
 * the request's transaction is joinable from the handler on so that a `retry()`/`timeout()`
 * interceptor inside `@Idempotent()` gives each try its own judgement (handler-try,
 * `handler_retried_inside`); an interceptor's statements before `next.handle()` run once for all
 * tries, and its plain reads (a lookup) would begin the request's transaction before the handler
 * could ask for its isolation level. A `SET LOCAL` outside a transaction block does nothing in
 * PostgreSQL, so refusing it breaks no app that worked.
 *
 * Docs mended (session of 2026-12-06 fifth), lib not: the guides, problems.md and the refusal's
 * message no longer advise an interceptor; they say to set the session in the handler itself,
 * the road this file's control proves. A `SET LOCAL` an app still sends from an interceptor runs
 * apart (PostgreSQL only warns outside a transaction block): the skipped case stays, for the
 * library to refuse or join it (lead: join from the first interceptor after `@Idempotent()`).
 *
 * Adversary 98 (orm): the guide's own fix for round 96's refusal ("set the tenant inside the
 * request: in the handler, or in an interceptor bound after `@Idempotent()`, with `SET LOCAL
 * search_path TO tenant_acme` ... on the request's manager") does not work in the interceptor:
 * an interceptor inside `@Idempotent()` runs before the handler starts, when the request's
 * transaction is not joinable yet (`runnerScope` 'later'), so its `SET LOCAL` runs on a pooled
 * connection of its own, in autocommit, where PostgreSQL ignores it (WARNING: SET LOCAL can only
 * be used in transaction blocks). The handler's insert then runs in the request's transaction
 * on the default search path and lands in `public`'s table: the other tenant's. 201 stored,
 * replayed; the tenant's table empty. Silent.
 *
 * User code (as the guide and docs/reference/problems.md tell it):
 *
 *   @Injectable() class TenantInterceptor implements NestInterceptor {
 *     constructor(private readonly tx: IdempotentTransaction) {}
 *     intercept(context, next) {
 *       const tenant = context.switchToHttp().getRequest().headers['x-tenant'];
 *       return from(this.tx.manager.query(`SET LOCAL search_path TO tenant_${tenant}`))
 *         .pipe(switchMap(() => next.handle()));
 *     }
 *   }
 *   @Post() @UseInterceptors(TenantInterceptor) @Idempotent()   // inside @Idempotent()
 *   async record(@Body() b) { await this.entries.insert({ tag: b.tag }); return { tag: b.tag }; }
 *
 * Code path: lib/idempotent.decorator.ts `markHandlerStart` → `context.startHandler()` sets
 * `transaction.joinable` only when the handler itself is called; before it (interceptors inside
 * `@Idempotent()`, pipes) lib/idempotent-transaction.service.ts `manager` answers the
 * DataSource's own manager (`current?.joinable` false), and lib/transaction/transaction-scope.ts
 * `joiningCreateQueryRunner` hands a runner of its own ('later' → `placeOfRunner` 'itself'):
 * the `SET LOCAL` runs outside every transaction.
 *
 * Docs quote: docs/guides/transactions.md: "For schema- or row-per-tenant apps, set the tenant
 * inside the request: in the handler, or in an interceptor bound after `@Idempotent()`, with
 * `SET LOCAL search_path TO tenant_acme` or `set_config('app.tenant', …, true)` on the
 * request's manager or on a runner made there"; docs/reference/problems.md
 * (`runner_connected_outside_request`): "set the session inside the request (the handler, or an
 * interceptor bound after `@Idempotent()`) with `SET LOCAL` or `set_config(…, true)`".
 *
 * Severity: high (the effect written to another tenant's table under a stored, replayed 201;
 * the tenant's write lost; following the guide's fix).
 *
 * Fails now (verified unskipped): tenant_acme rows [], public rows ['i1'], statuses
 * [201, 201] (expected tenant_acme ['i1'], public []). The guide's other form, "on a runner
 * made there" (a runner the interceptor makes, `SET LOCAL` on it, handed to the handler on the
 * request): that runner was connected before the handler ('later' → 'itself'), so the handler's
 * insert through it is refused: statuses ['500 runner_connected_outside_request' twice], no row
 * (expected the row in tenant_acme). Control: the same `SET LOCAL` in the handler: the row in
 * tenant_acme.
 *
 * Suggested fix: open (join) the request's transaction for statements sent inside
 * `@Idempotent()`'s scope before the handler (interceptors inside it), or at least refuse a
 * `SET LOCAL`/`set_config(…, true)` sent there (it can have no effect); and correct the guide
 * and problems.md: the session must be set in the handler (or a service it calls), not in an
 * interceptor.
 */
import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  type INestApplication,
  Injectable,
  type NestInterceptor,
  Post,
  Req,
  UseInterceptors,
} from '@nestjs/common';
import { InjectDataSource, InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { finalize, from, type Observable, switchMap } from 'rxjs';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  PrimaryGeneratedColumn,
  type QueryRunner,
  type Repository,
} from 'typeorm';
import { Idempotent, IdempotentTransaction } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv98_tenant_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

function tenantOf(context: ExecutionContext): string {
  const tenant = String(
    context.switchToHttp().getRequest<{ headers: Record<string, string> }>().headers['x-tenant'],
  );
  if (!/^[a-z]+$/.test(tenant)) throw new Error('bad tenant');
  return tenant;
}

@Injectable()
class TenantInterceptor implements NestInterceptor {
  constructor(private readonly tx: IdempotentTransaction) {}
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const tenant = tenantOf(context);
    return from(this.tx.manager.query(`SET LOCAL search_path TO tenant_${tenant}`)).pipe(
      switchMap(() => next.handle()),
    );
  }
}

/** The guide's other form: "on a runner made there". */
@Injectable()
class TenantRunnerInterceptor implements NestInterceptor {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const tenant = tenantOf(context);
    const runner = this.dataSource.createQueryRunner();
    context.switchToHttp().getRequest<{ runner?: QueryRunner }>().runner = runner;
    return from(runner.query(`SET LOCAL search_path TO tenant_${tenant}`)).pipe(
      switchMap(() => next.handle()),
      finalize(() => void runner.release()),
    );
  }
}

/** `set_config(…, true)`, its `is_local` a parameter. */
@Injectable()
class TenantConfigInterceptor implements NestInterceptor {
  constructor(private readonly tx: IdempotentTransaction) {}
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const tenant = tenantOf(context);
    return from(
      this.tx.manager.query('SELECT set_config($1, $2, $3)', ['app.tenant', tenant, true]),
    ).pipe(switchMap(() => next.handle()));
  }
}

/** A plain read before the handler (a lookup): runs as always. */
@Injectable()
class ReadingInterceptor implements NestInterceptor {
  constructor(private readonly tx: IdempotentTransaction) {}
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return from(this.tx.manager.query("SELECT 'local' AS word")).pipe(
      switchMap(() => next.handle()),
    );
  }
}

/** A `SET LOCAL` in a transaction of the interceptor's own: lasts as its code means, runs. */
@Injectable()
class OwnTransactionInterceptor implements NestInterceptor {
  constructor(private readonly tx: IdempotentTransaction) {}
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return from(
      this.tx.manager.transaction((manager) => manager.query("SET LOCAL statement_timeout = '5s'")),
    ).pipe(switchMap(() => next.handle()));
  }
}

const ran = new Set<string>();

@Controller()
class LedgerController {
  constructor(
    @InjectRepository(Entry) private readonly entries: Repository<Entry>,
    private readonly tx: IdempotentTransaction,
  ) {}

  @Post('in-handler')
  @Idempotent()
  async inHandler(@Body() body: { tag: string; tenant: string }) {
    await this.tx.manager.query(`SET LOCAL search_path TO tenant_${body.tenant}`);
    await this.entries.insert({ tag: body.tag });
    return { tag: body.tag };
  }

  @Post('in-interceptor')
  @UseInterceptors(TenantInterceptor)
  @Idempotent()
  async inInterceptor(@Body() body: { tag: string }) {
    await this.entries.insert({ tag: body.tag });
    return { tag: body.tag };
  }

  @Post('config-in-interceptor')
  @UseInterceptors(TenantConfigInterceptor)
  @Idempotent()
  async configInInterceptor(@Body() body: { tag: string }) {
    ran.add(body.tag);
    await this.entries.insert({ tag: body.tag });
    return { tag: body.tag };
  }

  @Post('read-in-interceptor')
  @UseInterceptors(ReadingInterceptor)
  @Idempotent()
  async readInInterceptor(@Body() body: { tag: string }) {
    await this.entries.insert({ tag: body.tag });
    return { tag: body.tag };
  }

  @Post('transaction-in-interceptor')
  @UseInterceptors(OwnTransactionInterceptor)
  @Idempotent()
  async transactionInInterceptor(@Body() body: { tag: string }) {
    await this.entries.insert({ tag: body.tag });
    return { tag: body.tag };
  }

  @Post('runner-in-interceptor')
  @UseInterceptors(TenantRunnerInterceptor)
  @Idempotent()
  async runnerInInterceptor(@Req() req: { runner: QueryRunner }, @Body() body: { tag: string }) {
    await req.runner.manager.insert(Entry, { tag: body.tag });
    return { tag: body.tag };
  }
}

describe('adversary 98 orm: SET LOCAL search_path in an interceptor inside @Idempotent(), as the guide says', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv98_orm_set_local_interceptor', {
      controllers: [LedgerController],
      providers: [
        TenantInterceptor,
        TenantRunnerInterceptor,
        TenantConfigInterceptor,
        ReadingInterceptor,
        OwnTransactionInterceptor,
      ],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE public.adv98_tenant_entries (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE SCHEMA tenant_acme;
          CREATE TABLE tenant_acme.adv98_tenant_entries (id serial PRIMARY KEY, tag text NOT NULL);
        `);
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: string, tag: string) {
    const post = () =>
      request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${tag}`)
        .set('X-Tenant', 'acme')
        .send({ tag, tenant: 'acme' });
    const first = await post();
    const again = await post();
    const rowsOf = async (schema: string) =>
      (
        await fixture.admin.query<{ tag: string }>(
          `SELECT tag FROM ${schema}.adv98_tenant_entries WHERE tag = $1 ORDER BY id`,
          [tag],
        )
      ).rows.map((row) => row.tag);
    const statusOf = (r: request.Response) =>
      r.status < 300 ? r.status : `${r.status} ${String((r.body as { code?: unknown }).code)}`;
    return {
      statuses: [statusOf(first), statusOf(again)],
      tenant: await rowsOf('tenant_acme'),
      public: await rowsOf('public'),
    };
  }

  it('control: SET LOCAL in the handler: the row in the tenant’s schema, once', async () => {
    expect(await scenario('in-handler', 'h1')).toEqual({
      statuses: [201, 201],
      tenant: ['h1'],
      public: [],
    });
  }, 30_000);

  const refused = '500 runner_connected_outside_request';

  it('SET LOCAL in an interceptor inside @Idempotent(): refused, never lost: no row in either schema', async () => {
    expect(await scenario('in-interceptor', 'i1')).toEqual({
      statuses: [refused, refused],
      tenant: [],
      public: [],
    });
  }, 30_000);

  it('a runner made in that interceptor, SET LOCAL on it: refused at the SET LOCAL, no row', async () => {
    expect(await scenario('runner-in-interceptor', 'r1')).toEqual({
      statuses: [refused, refused],
      tenant: [],
      public: [],
    });
  }, 30_000);

  it('set_config(…, true) in that interceptor: refused too, the handler never runs', async () => {
    ran.clear();
    expect(await scenario('config-in-interceptor', 'g1')).toEqual({
      statuses: [refused, refused],
      tenant: [],
      public: [],
    });
    expect(ran.has('g1')).toBe(false);
  }, 30_000);

  it('control: a SET LOCAL in a transaction of that interceptor’s own runs (it lasts there)', async () => {
    expect(await scenario('transaction-in-interceptor', 'x1')).toEqual({
      statuses: [201, 201],
      tenant: [],
      public: ['x1'],
    });
  }, 30_000);

  it('control: a plain read in that interceptor (its text naming local) runs as always', async () => {
    expect(await scenario('read-in-interceptor', 'p1')).toEqual({
      statuses: [201, 201],
      tenant: [],
      public: ['p1'],
    });
  }, 30_000);
});
