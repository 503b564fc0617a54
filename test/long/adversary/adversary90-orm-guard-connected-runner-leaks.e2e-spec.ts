/**
 * Changed (session of 2026-12-06 fifth, adversary 96's refusal): a runner connected outside
 * every scope (here by the guard's read) has its statements in the request refused,
 * `RunnerConnectedOutsideRequestError` (`placeOfRunner('connected', 'open' | 'ended')` =
 * `refuse`, lib/transaction/runner-place.ts; lib/transaction/transaction-scope.ts
 * `refusingStatements`): the library cannot tell a read from a session set up on that connection
 * (a function, a custom setting), and its writes there would commit apart from the answer. What
 * this test guards still holds: every request in turn is answered (the guard's connection goes
 * back to the pool at the runner's `release()`, no leak, no hang), now with the refusal, 500
 * `runner_connected_outside_request`, and no row written. The app reads in the guard through
 * the DataSource (or a runner it releases there) and writes with a runner made in the handler.
 *
 * Earlier (session of 2026-12-06 fourth): a runner made outside every scope that is already
 * connected when used in a request's scope (a guard read through it) stays itself there
 * (`placeOfRunner`: `connected` → `itself`, lib/transaction/runner-place.ts), as one with a
 * transaction of its own does: its statements run on its own connection, as without the library,
 * and its own `release()` gives that connection back.
 *
 * Adversary 90 (orm): a request-scoped unit of work whose runner a guard reads through (the
 * caller's account looked up with the request's runner) before the handler writes with it and
 * releases it. Guards run before interceptors, so the guard's read is sent outside every
 * transaction scope: TypeORM's `query()` connects the runner, which takes a connection of the
 * pool. In the handler the same runner (no transaction of its own open) stands for a view of
 * the request's transaction (round 88's `joiningWhereUsed`): its insert joins the request, and
 * its `release()` is the view's, which leaves the request's connection to the library. The
 * connection the guard's read took is never given back: one leaks per request, and once the
 * pool's `max` have leaked, every later request (idempotent or not) waits for a connection
 * forever (the DataSource's pool has no `connectionTimeoutMillis` by default): the app hangs.
 *
 * User code:
 *
 *   @Injectable({ scope: Scope.REQUEST })
 *   class UnitOfWork {
 *     readonly runner = this.dataSource.createQueryRunner();
 *     constructor(@InjectDataSource() private readonly dataSource: DataSource) {}
 *   }
 *   @Injectable() class AccountGuard implements CanActivate {
 *     constructor(private readonly uow: UnitOfWork) {}
 *     async canActivate() {
 *       const [row] = await this.uow.runner.query('SELECT true AS active');
 *       return row.active;
 *     }
 *   }
 *   @Post() @Idempotent() @UseGuards(AccountGuard) async record(@Body() b) {
 *     try { await this.uow.runner.manager.insert(Entry, { tag: b.tag }); }
 *     finally { await this.uow.runner.release(); }
 *     return { tag: b.tag };
 *   }
 *
 * Code path: lib/transaction/transaction-scope.ts `joiningWhereUsed`: `elsewhere()` swaps a
 * runner with no transaction of its own for `store.openRunner(dataSource)`
 * (lib/data-layers/lazy-transaction.ts `openRunner` → `viewOf` → lib/data-layers/runner-view.ts)
 * whether or not it is already connected; every property, `release` included, is then the
 * view's, and the runner underneath, connected outside the scope, is never released.
 *
 * Docs quote: docs/guides/transactions.md: "a runner made outside every request (a
 * `Scope.REQUEST` unit of work ...) joins the request it is used in, unless it has a
 * transaction of its own open"; transaction-scope.ts: "Outside any scope it is the runner it
 * always was"; the guide's promise of no hang ("that wait is bounded by `databaseTimeoutMs`").
 *
 * Severity: medium (the app hangs after `max` requests: every later request, idempotent or
 * not, waits forever for a connection; nothing is logged).
 *
 * Fails now (verified unskipped, twice): with a pool of 3, statuses [201, 201, 503,
 * 'timeout', 'timeout'] (expected five 201s): two connections leaked by the first two
 * requests, the third's guard takes the last and its claim meets `store_unavailable` after
 * `databaseTimeoutMs` (leaking that one too), the fourth's and fifth's guards wait for a
 * connection past the client's 8 s.
 * Control: the same guard and handler on a route without `@Idempotent()`: five 201s.
 *
 * Suggested fix: a runner made outside every scope that is already connected stays itself (as
 * one with a transaction of its own does) and is judged as writing apart; or, joined, its
 * `release()` also releases the runner underneath (its own connection, taken outside the
 * scope).
 */
import {
  Body,
  type CanActivate,
  Controller,
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

@Entity({ name: 'adv90_leak_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Injectable({ scope: Scope.REQUEST })
class UnitOfWork {
  readonly runner: QueryRunner;
  constructor(@InjectDataSource() dataSource: DataSource) {
    this.runner = dataSource.createQueryRunner();
  }
}

@Injectable()
class AccountGuard implements CanActivate {
  constructor(@Inject(UnitOfWork) private readonly uow: UnitOfWork) {}

  async canActivate(): Promise<boolean> {
    const [row] = (await this.uow.runner.query('SELECT true AS active')) as { active: boolean }[];
    return row?.active === true;
  }
}

@Controller()
class LedgerController {
  constructor(@Inject(UnitOfWork) private readonly uow: UnitOfWork) {}

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
  @UseGuards(AccountGuard)
  recordIdempotent(@Body() body: { tag: string }) {
    return this.record(body.tag);
  }

  @Post('plain')
  @UseGuards(AccountGuard)
  recordPlain(@Body() body: { tag: string }) {
    return this.record(body.tag);
  }
}

describe('adversary 90 orm: a guard reads through a request-scoped runner before the handler', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv90_orm_guard_runner_leak', {
      controllers: [LedgerController],
      providers: [UnitOfWork, AccountGuard],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 3,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv90_leak_entries (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'idempotent' | 'plain', prefix: string) {
    const statuses: (number | string)[] = [];
    for (let i = 0; i < 5; i++) {
      const tag = `${prefix}-${i}`;
      statuses.push(
        await request(app.getHttpServer())
          .post(`/${route}`)
          .set('Idempotency-Key', `key-${tag}`)
          .timeout(8_000)
          .send({ tag })
          .then(
            (response) => response.status,
            () => 'timeout',
          ),
      );
    }
    return statuses;
  }

  it('control: without @Idempotent(): the guard’s connection given back at release(), five 201s', async () => {
    expect(await scenario('plain', 'c')).toEqual([201, 201, 201, 201, 201]);
  }, 60_000);

  it('@Idempotent(): five requests in turn each answered (refused clearly, none written, no connection leaked)', async () => {
    expect(await scenario('idempotent', 'u')).toEqual([500, 500, 500, 500, 500]);
    const answer = await request(app.getHttpServer())
      .post('/idempotent')
      .set('Idempotency-Key', 'key-u-0')
      .timeout(8_000)
      .send({ tag: 'u-0' });
    expect([answer.status, (answer.body as { code?: unknown }).code]).toEqual([
      500,
      'runner_connected_outside_request',
    ]);
    const rows = await fixture.admin.query(
      `SELECT tag FROM adv90_leak_entries WHERE tag LIKE 'u-%'`,
    );
    expect(rows.rows).toEqual([]);
  }, 60_000);
});
