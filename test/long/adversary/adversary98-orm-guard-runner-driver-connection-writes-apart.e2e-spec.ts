/**
 * Fixed (session of 2026-12-06, sixth): `refusingStatements` refuses the read of
 * `databaseConnection` itself (RunnerConnectedOutsideRequestError, the request rolled back),
 * so the guard's connection is never handed out in the request. The joined road is checked too
 * (new cases): a runner made in the handler, or outside the request and not connected, reads as
 * `databaseConnection`, once it sent a statement, the request's connection (the library's guarded
 * client): its statements run in the request's transaction, rolled back with a failed try.
 *
 * Adversary 98 (orm): the refusal of a guard-connected runner (round 96's fix) covers what the
 * runner sends through its methods, but not its driver connection, which the same runner object
 * hands out in the request: `runner.databaseConnection` (the pg client a `COPY ... FROM STDIN`
 * with pg-copy-streams, or a LISTEN helper, is given) writes on the guard's connection, in
 * autocommit, apart from the request: a try that failed (503 retry_later) keeps its row, and the
 * retry writes it again.
 *
 * User code:
 *
 *   @Injectable({ scope: Scope.REQUEST })
 *   class UnitOfWork { readonly runner = this.dataSource.createQueryRunner(); ... }
 *   @Injectable() class ReadingGuard { async canActivate() {
 *     await this.uow.runner.query('SELECT 1'); return true; } }   // e.g. reads the tenant
 *   @Post() @Idempotent() @UseGuards(ReadingGuard) async record(@Body() b) {
 *     const client = (this.uow.runner as PostgresQueryRunner).databaseConnection;
 *     await client.query('INSERT INTO entries (tag) VALUES ($1)', [b.tag]); // (a COPY stream)
 *     if (downstreamDown) throw new RetryLaterError('down');
 *     return { tag: b.tag };
 *   }
 *
 * Code path: lib/transaction/transaction-scope.ts `joiningWhereUsed` → `placeOfRunner`
 * ('connected', 'open') = 'refuse' → `refusingStatements`: its proxy refuses only the SENDING
 * methods (`query`, `stream`, `startTransaction`, `connect`); a non-function property is
 * returned as is (`if (typeof value !== 'function' ...) return value`), so `databaseConnection`
 * is the guard's live pg client, whose statements nothing watches.
 *
 * Docs quote (docs/guides/transactions.md): "A runner already connected before the handler ...
 * cannot be placed: on its own connection its writes would commit apart from the request's
 * answer, and a retry would write them again ... So every statement it sends in the request ...
 * is refused with `RunnerConnectedOutsideRequestError`".
 *
 * Severity: high (an effect twice: the failed try's row committed apart, the retry's row too).
 * Caveat: the app reaches past TypeORM's QueryRunner interface to the driver's client (typed on
 * `PostgresQueryRunner`); the guide names "a raw `pg` pool" among writes that cannot join.
 *
 * Fails now (verified unskipped): statuses ['503 retry_later', '201'], rows ['c1', 'c1']
 * (expected the refusal: ['500 runner_connected_outside_request', same], rows []).
 * Control: the same runner's `manager.insert` in the same request is refused, nothing written.
 *
 * Suggested fix: in `refusingStatements` (and wherever a view stands for another runner) answer
 * `databaseConnection` with a client whose `query`/`connect` are refused the same way (or
 * undefined), so that the guard's connection cannot be reached through the runner in the
 * request; or name `databaseConnection` in the guide as a road the refusal does not cover.
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
import { Idempotent, RetryLaterError } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv98_raw_entries', synchronize: false })
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
class ReadingGuard implements CanActivate {
  constructor(@Inject(UnitOfWork) private readonly uow: UnitOfWork) {}
  async canActivate(context: ExecutionContext): Promise<boolean> {
    context
      .switchToHttp()
      .getResponse<{ once(event: 'close', listener: () => void): unknown }>()
      .once('close', () => void this.uow.runner.release());
    await this.uow.runner.query('SELECT 1');
    return true;
  }
}

const downOnce = new Set<string>();

type Client = { query(text: string, values: unknown[]): Promise<unknown> };
const clientOf = (runner: QueryRunner) =>
  (runner as unknown as { databaseConnection: Client }).databaseConnection;

@Controller()
class LedgerController {
  constructor(
    @Inject(UnitOfWork) private readonly uow: UnitOfWork,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  /** The joined road: a runner made in the handler, its client read after a statement. */
  @Post('joined-driver')
  @Idempotent()
  async joinedDriver(@Body() body: { tag: string }) {
    const runner = this.dataSource.createQueryRunner();
    try {
      await runner.query('INSERT INTO adv98_raw_entries (tag) VALUES ($1)', [`${body.tag}-a`]);
      await clientOf(runner).query('INSERT INTO adv98_raw_entries (tag) VALUES ($1)', [body.tag]);
    } finally {
      await runner.release();
    }
    if (downOnce.delete(body.tag)) throw new RetryLaterError('down');
    return { tag: body.tag };
  }

  /** The joined road for a runner made outside the request (no guard connected it). */
  @Post('joined-uow-driver')
  @Idempotent()
  async joinedUowDriver(@Body() body: { tag: string }) {
    try {
      await this.uow.runner.query('INSERT INTO adv98_raw_entries (tag) VALUES ($1)', [
        `${body.tag}-a`,
      ]);
      await clientOf(this.uow.runner).query('INSERT INTO adv98_raw_entries (tag) VALUES ($1)', [
        body.tag,
      ]);
    } finally {
      await this.uow.runner.release();
    }
    if (downOnce.delete(body.tag)) throw new RetryLaterError('down');
    return { tag: body.tag };
  }

  @Post('manager')
  @Idempotent()
  @UseGuards(ReadingGuard)
  async viaManager(@Body() body: { tag: string }) {
    await this.uow.runner.manager.insert(Entry, { tag: body.tag });
    if (downOnce.delete(body.tag)) throw new RetryLaterError('down');
    return { tag: body.tag };
  }

  @Post('driver')
  @Idempotent()
  @UseGuards(ReadingGuard)
  async viaDriver(@Body() body: { tag: string }) {
    const client = (
      this.uow.runner as unknown as {
        databaseConnection: { query(text: string, values: unknown[]): Promise<unknown> };
      }
    ).databaseConnection;
    await client.query('INSERT INTO adv98_raw_entries (tag) VALUES ($1)', [body.tag]);
    if (downOnce.delete(body.tag)) throw new RetryLaterError('down');
    return { tag: body.tag };
  }
}

describe('adversary 98 orm: a guard-connected runner’s driver connection used in the request', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv98_orm_runner_driver', {
      controllers: [LedgerController],
      providers: [UnitOfWork, ReadingGuard],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE public.adv98_raw_entries (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: string, tag: string) {
    downOnce.add(tag);
    const post = () =>
      request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${tag}`)
        .send({ tag });
    const first = await post();
    const again = await post();
    const statusOf = (r: request.Response) =>
      [String(r.status), (r.body as { code?: string }).code].filter(Boolean).join(' ');
    const rows = (
      await fixture.admin.query<{ tag: string }>(
        'SELECT tag FROM public.adv98_raw_entries WHERE tag = $1',
        [tag],
      )
    ).rows.map((r) => r.tag);
    return { statuses: [statusOf(first), statusOf(again)], rows };
  }

  const refused = '500 runner_connected_outside_request';

  it('control: the runner’s manager in the request is refused, nothing written', async () => {
    expect(await scenario('manager', 'm1')).toEqual({ statuses: [refused, refused], rows: [] });
  }, 30_000);

  it('its databaseConnection is refused too, never writing apart', async () => {
    expect(await scenario('driver', 'c1')).toEqual({ statuses: [refused, refused], rows: [] });
  }, 30_000);

  it.each([
    ['made in the handler', 'joined-driver', 'j1'],
    ['made outside the request, not connected', 'joined-uow-driver', 'j2'],
  ])(
    'a joined runner (%s): its databaseConnection writes in the request’s transaction: the failed try’s row rolled back, one row',
    async (_, route, tag) => {
      expect(await scenario(route, tag)).toEqual({
        statuses: ['503 retry_later', '201'],
        rows: [tag],
      });
    },
    30_000,
  );
});
