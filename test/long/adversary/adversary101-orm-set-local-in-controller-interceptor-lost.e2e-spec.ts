/**
 * Not fixed (session of 2026-12-06, sixth): a stated limit, in docs/guides/transactions.md. The
 * same interceptor without the library loses the setting the same way (a `SET LOCAL` in
 * autocommit), so the library loses nothing of its own here; its refusal is a courtesy for the
 * forms it can read (a setting that ends its statement's text, sent inside `@Idempotent()`).
 * Refusing every function call or `DO` block before the handler would refuse ordinary reads,
 * and an interceptor above `@Idempotent()` runs before the library has met the request (lead:
 * a global hook that marks `@Idempotent()` routes from the first interceptor on). The guide now
 * names the handler as the one place to set the session.
 *
 * Adversary 101 (orm): round 98's refusal of a `SET LOCAL` / `set_config(…, true)` sent before
 * the handler only looks inside `@Idempotent()`'s scope (`store.runnerScope` 'later'). The
 * usual place for a tenant interceptor is the controller (`@UseInterceptors()` on the class) or
 * the app (`APP_INTERCEPTOR`, `useGlobalInterceptors`): Nest runs those before the route's
 * `@Idempotent()`, where there is no transaction scope yet (`transactionScope.getStore()`
 * undefined), so the `SET LOCAL` runs on a pooled connection in autocommit, is forgotten, and
 * the handler's insert lands in `public`'s table (the other tenant's) under a stored, replayed
 * 201. Exactly round 98's silent loss, which problems.md now says is refused whenever such a
 * setting is "sent through the DataSource before the handler started".
 *
 * User code:
 *
 *   @Injectable() class TenantInterceptor implements NestInterceptor {
 *     constructor(private readonly tx: IdempotentTransaction) {}
 *     intercept(context, next) {
 *       return from(this.tx.manager.query(`SET LOCAL search_path TO tenant_${tenant}`))
 *         .pipe(switchMap(() => next.handle()));
 *     }
 *   }
 *   @Controller() @UseInterceptors(TenantInterceptor)      // global ones (APP_INTERCEPTOR) run earlier still: not run here
 *   class LedgerController {
 *     @Post() @Idempotent()
 *     async record(@Body() b) { await this.entries.insert({ tag: b.tag }); return { tag: b.tag }; }
 *   }
 *
 * Code path: lib/transaction/transaction-scope.ts `joiningCreateQueryRunner`: no store →
 * `joiningWhereUsed(own runner)`; its `query` getter → `refusingSessionSetsBeforeHandler`,
 * whose first condition (`store &&`) is false outside every scope → the statement runs as it
 * is, apart; lib/idempotent-transaction.service.ts `manager` answers the DataSource's manager.
 *
 * Docs quote: docs/reference/problems.md (`runner_connected_outside_request`): "or a `SET LOCAL`
 * / `set_config(…, true)` was sent through the DataSource before the handler started (an
 * interceptor bound inside `@Idempotent()`, a pipe), where it would run outside any transaction
 * and be lost: ... refused, rolled back, nothing stored, lease released"; docs/guides/
 * transactions.md: "set the tenant inside the request, in the handler itself ... (not in an
 * interceptor: ... it is refused, the key given back and nothing stored".
 *
 * Severity: high (the effect written to another tenant's table under a stored, replayed 201;
 * silent, in the most common place a tenant interceptor is bound).
 *
 * Fails now (verified unskipped): statuses [201, 201], tenant_acme [], public ['c1']
 * (expected the 500 `runner_connected_outside_request` twice and no row). Controls: the
 * `SET LOCAL` in the handler puts the row in tenant_acme; the same interceptor bound inside
 * `@Idempotent()` on the method is refused.
 *
 * Suggested fix: on a route with `@Idempotent()`, refuse (or hold to the handler) a
 * transaction-only setting sent in the request before `@Idempotent()`'s interceptor runs: e.g.
 * open the request's context (a 'later' scope) from a middleware or an early global
 * interceptor/guard the module registers, so that controller-level and global interceptors are
 * judged as the ones inside are; or, if that is out of reach, say so plainly in the guide and
 * problems.md (only interceptors inside `@Idempotent()` and pipes are caught; a controller's or
 * global interceptor's `SET LOCAL` is lost silently).
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
  UseInterceptors,
} from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { from, type Observable, switchMap } from 'rxjs';
import request from 'supertest';
import { Column, Entity, PrimaryGeneratedColumn, type Repository } from 'typeorm';
import { Idempotent, IdempotentTransaction } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv101c_tenant_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Injectable()
class TenantInterceptor implements NestInterceptor {
  constructor(private readonly tx: IdempotentTransaction) {}
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const tenant = String(
      context.switchToHttp().getRequest<{ headers: Record<string, string> }>().headers['x-tenant'],
    );
    if (!/^[a-z]+$/.test(tenant)) throw new Error('bad tenant');
    return from(this.tx.manager.query(`SET LOCAL search_path TO tenant_${tenant}`)).pipe(
      switchMap(() => next.handle()),
    );
  }
}

/** The tenant interceptor on the controller: runs before the route's `@Idempotent()`. */
@Controller('scoped')
@UseInterceptors(TenantInterceptor)
class ScopedController {
  constructor(@InjectRepository(Entry) private readonly entries: Repository<Entry>) {}

  @Post('record')
  @Idempotent()
  async record(@Body() body: { tag: string }) {
    await this.entries.insert({ tag: body.tag });
    return { tag: body.tag };
  }
}

@Controller('plain')
class PlainController {
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

  @Post('inside')
  @UseInterceptors(TenantInterceptor)
  @Idempotent()
  async inside(@Body() body: { tag: string }) {
    await this.entries.insert({ tag: body.tag });
    return { tag: body.tag };
  }
}

describe('adversary 101 orm: SET LOCAL in a controller-level tenant interceptor', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv101_orm_set_local_controller', {
      controllers: [ScopedController, PlainController],
      providers: [TenantInterceptor],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE public.adv101c_tenant_entries (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE SCHEMA tenant_acme;
          CREATE TABLE tenant_acme.adv101c_tenant_entries (id serial PRIMARY KEY, tag text NOT NULL);
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
          `SELECT tag FROM ${schema}.adv101c_tenant_entries WHERE tag = $1 ORDER BY id`,
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

  const refused = '500 runner_connected_outside_request';

  it('control: SET LOCAL in the handler: the row in the tenant’s schema, once', async () => {
    expect(await scenario('plain/in-handler', 'h1')).toEqual({
      statuses: [201, 201],
      tenant: ['h1'],
      public: [],
    });
  }, 30_000);

  it('control: the interceptor bound inside @Idempotent() on the method is refused', async () => {
    expect(await scenario('plain/inside', 'i1')).toEqual({
      statuses: [refused, refused],
      tenant: [],
      public: [],
    });
  }, 30_000);

  it.skip('the interceptor on the controller: refused, never written to another tenant (Not fixed (round 101): found by review)', async () => {
    expect(await scenario('scoped/record', 'c1')).toEqual({
      statuses: [refused, refused],
      tenant: [],
      public: [],
    });
  }, 30_000);
});
