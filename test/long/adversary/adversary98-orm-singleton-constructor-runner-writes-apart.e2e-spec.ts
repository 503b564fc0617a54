/**
 * Fixed (session of 2026-12-06, sixth): the library hooks TypeORM's
 * `DataSource.prototype.createQueryRunner` as it is loaded (lib/transaction/transaction-scope.ts
 * `joiningFromTheStart`, through `optionalRequire('typeorm')`), before any provider of the app
 * exists: a runner a PostgreSQL DataSource makes before `IdempotencyDataSource` found it is
 * wrapped by `joiningWhereUsed` as one made after is, and inert (itself) until the library joins
 * that DataSource. Whatever the creation time, every runner of the joined DataSource is judged
 * where its statement is sent; the singleton writer's insert joins the request: one row.
 *
 * Adversary 98 (orm): a query runner made in a singleton provider's constructor (a unit of work
 * or outbox writer that keeps one runner, `this.runner = dataSource.createQueryRunner()`) is
 * made before the library patches the DataSource: `joinTransactionsOf` runs when
 * `IdempotencyDataSource` resolves the DataSource, after Nest has built the app's providers. So
 * that runner is TypeORM's plain runner, never wrapped (`joiningWhereUsed`): in an idempotent
 * request it neither joins the request's transaction nor is refused as connected outside it; its
 * insert commits at once on its own connection. A try that fails (503 retry_later: "rolled back,
 * nothing stored") keeps its row, and the retry writes it again.
 *
 * User code:
 *
 *   @Injectable()                              // a singleton, the default
 *   class LedgerWriter {
 *     readonly runner: QueryRunner;
 *     constructor(@InjectDataSource() dataSource: DataSource) {
 *       this.runner = dataSource.createQueryRunner();
 *     }
 *   }
 *   @Post() @Idempotent() async record(@Body() b) {
 *     await this.writer.runner.manager.insert(Entry, { tag: b.tag });
 *     await this.bank.confirm(b.tag);          // RetryLaterError once
 *     return { tag: b.tag };
 *   }
 *
 * Code path: lib/idempotency-data-source.ts `resolve()` → lib/transaction/transaction-scope.ts
 * `joinTransactionsOf` replaces `dataSource.createQueryRunner` only from then on; a runner made
 * before (any provider's constructor, run before the library's init) is the DataSource's own,
 * and nothing in the request's scope sees its statements (`placeOfRunner` is never asked).
 *
 * Docs quote (docs/guides/transactions.md): "What a statement joins is decided where it is sent,
 * not where its runner was made: a runner made outside every request ... joins the request it
 * is used in, unless it has a transaction of its own open"; "Writes that cannot join are those
 * that do not go through this DataSource: another DataSource, a raw `pg` pool, or work handed to
 * a queue". This one goes through this DataSource.
 *
 * Severity: high (an effect twice: the failed try's row committed apart, then the retry's).
 *
 * Fails now (verified unskipped): statuses ['503 retry_later', '201'], rows ['s1', 's1']
 * (expected one row). Control: the same writer as a `Scope.REQUEST` provider (its runner made
 * after the patch): one row.
 *
 * Suggested fix: patch the DataSource's `createQueryRunner` as soon as the DataSource provider
 * exists (a provider of the library's that Nest builds right after `TypeOrmModule`'s, or the
 * prototype of `DataSource`), or, at `joinTransactionsOf`, wrap the runners the DataSource
 * already made (`driver.connectedQueryRunners` holds only connected ones); else name the case in
 * the guide ("make runners per request, not in a singleton's constructor").
 */
import {
  Body,
  Controller,
  type INestApplication,
  Inject,
  Injectable,
  Post,
  Scope,
} from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn, type QueryRunner } from 'typeorm';
import { Idempotent, RetryLaterError } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv98_singleton_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Injectable()
class LedgerWriter {
  readonly runner: QueryRunner;
  constructor(@InjectDataSource() dataSource: DataSource) {
    this.runner = dataSource.createQueryRunner();
  }
}

@Injectable({ scope: Scope.REQUEST })
class RequestLedgerWriter {
  readonly runner: QueryRunner;
  constructor(@InjectDataSource() dataSource: DataSource) {
    this.runner = dataSource.createQueryRunner();
  }
}

const downOnce = new Set<string>();

@Controller()
class LedgerController {
  constructor(
    private readonly writer: LedgerWriter,
    @Inject(RequestLedgerWriter) private readonly perRequest: RequestLedgerWriter,
  ) {}

  @Post('singleton')
  @Idempotent()
  async singleton(@Body() body: { tag: string }) {
    await this.writer.runner.manager.insert(Entry, { tag: body.tag });
    if (downOnce.delete(body.tag)) throw new RetryLaterError('the bank is down');
    return { tag: body.tag };
  }

  @Post('per-request')
  @Idempotent()
  async perRequestWrite(@Body() body: { tag: string }) {
    try {
      await this.perRequest.runner.manager.insert(Entry, { tag: body.tag });
    } finally {
      await this.perRequest.runner.release();
    }
    if (downOnce.delete(body.tag)) throw new RetryLaterError('the bank is down');
    return { tag: body.tag };
  }
}

describe('adversary 98 orm: a runner made in a singleton provider’s constructor', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv98_orm_singleton_runner', {
      controllers: [LedgerController],
      providers: [LedgerWriter, RequestLedgerWriter],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE public.adv98_singleton_entries (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await app?.get(LedgerWriter).runner.release();
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
        'SELECT tag FROM public.adv98_singleton_entries WHERE tag = $1',
        [tag],
      )
    ).rows.map((r) => r.tag);
    return { statuses: [statusOf(first), statusOf(again)], rows };
  }

  it('control: a Scope.REQUEST writer’s runner joins: the failed try’s row rolled back, one row', async () => {
    expect(await scenario('per-request', 'r1')).toEqual({
      statuses: ['503 retry_later', '201'],
      rows: ['r1'],
    });
  }, 30_000);

  it('a singleton writer’s runner joins too: one row', async () => {
    expect(await scenario('singleton', 's1')).toEqual({
      statuses: ['503 retry_later', '201'],
      rows: ['s1'],
    });
  }, 30_000);
});
