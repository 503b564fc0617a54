/**
 * Fixed (session of 2026-12-06 fifth): refused, because the library cannot place such a runner's
 * statements in the request without changing their meaning (issue 27): the guard connected the
 * runner outside every scope, so `placeOfRunner('connected', 'open' | 'ended')` is now `refuse`
 * (lib/transaction/runner-place.ts), decided where the runner's statements are sent, not per
 * method: `refusingStatements` (lib/transaction/transaction-scope.ts) refuses `query`, `stream`,
 * `startTransaction` and `connect`, and binds every other method (`clearTable`, the `sql` tag,
 * `hasTable`…) to the refusing runner, so their `this.query` is refused too. The request answers
 * 500 `runner_connected_outside_request` (RunnerConnectedOutsideRequestError), rolls back,
 * stores nothing; neither table is touched, and a retry with the same key is refused the same way.
 *
 * Adversary 96 (orm): a guard points a request-scoped runner at the tenant's schema (`SET
 * search_path TO tenant_acme`, the case round 90 fixed with `carryingSession`), and the handler
 * empties the tenant's cart with TypeORM's own `manager.clear(CartLine)` (or
 * `getRepository(CartLine).clear()`) through that runner: `TRUNCATE TABLE "adv96_cart"`, sent by
 * the runner's `clearTable()`. `carryingSession` carries the session only before the methods it
 * lists as sending (`query`, `stream`, `startTransaction`, `connect`); every other method is
 * bound to the view underneath (`call.bind(target)`), so `clearTable()` (and `hasTable`,
 * `getTable`, `createTable`… which call `this.query` on the view itself) runs in the request's
 * transaction WITHOUT the guard's search path: the TRUNCATE (and the `sql` tag's DELETE) hits `public.adv96_cart`, another
 * tenant's table, and the tenant's own cart is left full. 201 stored and replayed; silent.
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
 *   @Post('empty') @Idempotent() @UseGuards(TenantGuard) async empty() {
 *     try { await this.uow.runner.manager.clear(CartLine); }
 *     finally { await this.uow.runner.release(); }
 *   }
 *
 * Code path: lib/transaction/runner-session.ts `carryingSession`: the Proxy's `get` runs
 * `carry()` only for `SENDING` = query/stream/startTransaction/connect; `clearTable` is
 * `call.bind(target)`, so typeorm's PostgresQueryRunner.clearTable's `this.query(...)` is the
 * view's own `query` (lib/data-layers/lazy-transaction.ts), the carry never runs;
 * lib/transaction/runner-place.ts `placeOfRunner('connected','open')` = 'join-with-session'.
 * (typeorm EntityManager.clear → `this.queryRunner.clearTable(metadata.tablePath)`.)
 *
 * Docs quote: docs/guides/transactions.md: "A runner already connected (a runner a guard read
 * through, or pointed at the tenant's schema with `SET search_path`) joins too, and takes its
 * session with it: before its first statement in the request, the session authorization, role
 * and settings its code set on its own connection ... are set in the request's transaction with
 * `SET LOCAL` where they differ there, so its writes land where its code pointed them".
 *
 * Severity: high (an effect in the wrong tenant: another tenant's table emptied, the tenant's
 * own effect lost, a 201 stored and replayed).
 *
 * Fails now (verified unskipped): `manager.clear()`: status 201, tenant_acme rows ['t1']
 * (expected []), public rows [] (expected ['t1']). The `runner.sql` template tag
 * (BaseQueryRunner.sql, `this.query` on the view) the same: status 201, tenant_acme ['t2'],
 * public [] (its DELETE hit public's row). (Run right after the clear case it passed once: the
 * pool's connections then carried a session the earlier case left; alone it fails.) Control:
 * the same guard and handlers without `@Idempotent()` act on tenant_acme's table only.
 *
 * Suggested fix: make the carrier the `this` of every method it forwards (`call.apply(carrier,
 * args)` / `Reflect.get(target, property, carrier)`), so the helpers' own `this.query` goes
 * through the carry; or carry before any method call that may send (everything but the
 * plain getters), not only the four listed.
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

@Entity({ name: 'adv96_cart', synchronize: false })
class CartLine {
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
class CartController {
  constructor(@Inject(TenantUnitOfWork) private readonly uow: TenantUnitOfWork) {}

  /** Empties the tenant's cart: TypeORM's own `clear()` (TRUNCATE through the runner). */
  private async emptyCart() {
    try {
      await this.uow.runner.manager.clear(CartLine);
    } finally {
      await this.uow.runner.release();
    }
    return { emptied: true };
  }

  /** Deletes one line with TypeORM's `sql` template tag on the runner. */
  private async removeLine(tag: string) {
    try {
      await this.uow.runner.sql`DELETE FROM adv96_cart WHERE tag = ${tag}`;
    } finally {
      await this.uow.runner.release();
    }
    return { removed: tag };
  }

  @Post('idempotent/empty')
  @Idempotent()
  @UseGuards(TenantGuard)
  emptyIdempotent() {
    return this.emptyCart();
  }

  @Post('plain/empty')
  @UseGuards(TenantGuard)
  emptyPlain() {
    return this.emptyCart();
  }

  @Post('idempotent/remove')
  @Idempotent()
  @UseGuards(TenantGuard)
  removeIdempotent(@Body() body: { tag: string }) {
    return this.removeLine(body.tag);
  }

  @Post('plain/remove')
  @UseGuards(TenantGuard)
  removePlain(@Body() body: { tag: string }) {
    return this.removeLine(body.tag);
  }
}

describe('adversary 96 orm: TypeORM helpers on a guard’s runner skip the carried session', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv96_orm_guard_runner_helpers', {
      controllers: [CartController],
      providers: [TenantUnitOfWork, TenantGuard],
      entities: [CartLine],
      imports: [TypeOrmModule.forFeature([CartLine])],
      max: 6,
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE public.adv96_cart (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE SCHEMA tenant_acme;
          CREATE TABLE tenant_acme.adv96_cart (id serial PRIMARY KEY, tag text NOT NULL);
        `);
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(path: string, tag: string) {
    await fixture.admin.query(`
      TRUNCATE public.adv96_cart, tenant_acme.adv96_cart;
      INSERT INTO public.adv96_cart (tag) VALUES ('${tag}');
      INSERT INTO tenant_acme.adv96_cart (tag) VALUES ('${tag}');
    `);
    const response = await request(app.getHttpServer())
      .post(`/${path}`)
      .set('Idempotency-Key', `key-${path}-${tag}`)
      .set('X-Tenant', 'acme')
      .send({ tag });
    const rowsOf = async (schema: string) =>
      (await fixture.admin.query<{ tag: string }>(`SELECT tag FROM ${schema}.adv96_cart`)).rows.map(
        (row) => row.tag,
      );
    return {
      status: response.status,
      code: (response.body as { code?: unknown }).code,
      tenant: await rowsOf('tenant_acme'),
      public: await rowsOf('public'),
    };
  }

  it('control: without @Idempotent(): clear() and sql`` act on the tenant’s table', async () => {
    expect(await scenario('plain/empty', 'c1')).toEqual({
      status: 201,
      tenant: [],
      public: ['c1'],
    });
    expect(await scenario('plain/remove', 'c2')).toEqual({
      status: 201,
      tenant: [],
      public: ['c2'],
    });
  }, 30_000);

  it('@Idempotent(): manager.clear() refused clearly, neither table touched, a retry refused the same', async () => {
    for (let attempt = 0; attempt < 2; attempt++) {
      expect(await scenario('idempotent/empty', 't1')).toEqual({
        status: 500,
        code: 'runner_connected_outside_request',
        tenant: ['t1'],
        public: ['t1'],
      });
    }
  }, 30_000);

  it('@Idempotent(): runner.sql`` refused clearly, neither table touched, a retry refused the same', async () => {
    for (let attempt = 0; attempt < 2; attempt++) {
      expect(await scenario('idempotent/remove', 't2')).toEqual({
        status: 500,
        code: 'runner_connected_outside_request',
        tenant: ['t2'],
        public: ['t2'],
      });
    }
  }, 30_000);
});
