/**
 * Fixed (session of 2026-12-06 fourth): a runner `createQueryRunner()` hands out inside
 * `@Idempotent()`'s scope before its transaction is joinable (an atomic route's handler not
 * started: an interceptor of the app's above `@Idempotent()`, a pipe) is wrapped as one made
 * outside every scope (`joiningWhereUsed`, by `runnerScope` answering `later`): its statements
 * before the handler run on its own as before, and it joins the request's transaction from the
 * handler on (`placeOfRunner`, lib/transaction/runner-place.ts), unless its code began a
 * transaction of its own or connected it meanwhile.
 *
 * Adversary 90 (orm): a query runner made inside `@Idempotent()`'s scope but before the
 * handler starts: an interceptor of the app's written above `@Idempotent()` on the method (so
 * inside it, as the guide places a `retry()` or `timeout()`) that hands each request its query
 * runner (`req.runner = dataSource.createQueryRunner()`), or a pipe that does. Until the
 * handler starts the request's transaction is not joinable (a pipe's reads need none), and
 * `joinTransactionsOf`'s `createQueryRunner` then hands a plain runner of the DataSource:
 * neither a view of the request's runner nor round 88's runner that joins where it is used
 * (that one is only for runners made outside every scope). The handler's writes through it
 * commit on their own, at once: a try that fails with `RetryLaterError` (503, "rolled back,
 * nothing stored") keeps its row, and the retry writes it again. The same interceptor written
 * below `@Idempotent()` (outside it, its runner made outside every scope) joins: one row.
 *
 * User code:
 *
 *   @Injectable() class RunnerPerRequest implements NestInterceptor {
 *     constructor(@InjectDataSource() private readonly dataSource: DataSource) {}
 *     intercept(context: ExecutionContext, next: CallHandler) {
 *       context.switchToHttp().getRequest().runner = this.dataSource.createQueryRunner();
 *       return next.handle();
 *     }
 *   }
 *   @Post() @UseInterceptors(RunnerPerRequest) @Idempotent()
 *   async record(@Req() req, @Body() b) {
 *     await req.runner.manager.insert(Entry, { tag: b.tag });
 *     await this.bank.confirm(b.tag);            // RetryLaterError once
 *     return { tag: b.tag };
 *   }
 *
 * Code path: lib/transaction/transaction-scope.ts `joiningCreateQueryRunner`: with a store,
 * `store.joinedRunner?.(this, mode) ?? own.call(this, mode)`;
 * lib/data-layers/lazy-transaction.ts `joinedRunner` answers undefined while `!this.joinable`
 * (set at `startHandler`, lib/transaction/idempotency-context.ts), so the runner is the
 * DataSource's own, never wrapped by `joiningWhereUsed`, and stays so in the handler.
 *
 * Docs quote: docs/guides/transactions.md: "every query runner the app's DataSource creates
 * inside it is the request's"; "What a statement joins is decided where it is sent, not where
 * its runner was made: a runner made outside every request ... joins the request it is used
 * in"; the table: `RetryLaterError` "rolled back, nothing stored, lease released | runs it
 * once".
 *
 * Severity: high (an effect twice for one key: the failed try's row committed on its own, the
 * retry's with the answer; silent).
 *
 * Fails now (verified unskipped, twice): rows ['u1', 'u1'] (expected ['u1']), statuses
 * [503, 201].
 * Control: the same interceptor written below `@Idempotent()` (outside its scope): ['c1'].
 *
 * Suggested fix: in `joiningCreateQueryRunner`, a runner asked for in a scope whose
 * transaction is not joinable yet (before the handler starts) is wrapped as one made outside
 * every scope (`joiningWhereUsed`): its statements before the handler run on its own, as now,
 * and it joins once the transaction is joinable, unless its code opened a transaction of its
 * own meanwhile.
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
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn, type QueryRunner } from 'typeorm';
import { Idempotent, RetryLaterError } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv90_inner_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

const downOnce = new Set<string>();
function confirm(tag: string) {
  if (downOnce.delete(tag)) throw new RetryLaterError('the bank is down');
}

interface WithRunner {
  runner: QueryRunner;
}

@Injectable()
class RunnerPerRequest implements NestInterceptor {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  intercept(context: ExecutionContext, next: CallHandler) {
    context.switchToHttp().getRequest<WithRunner>().runner = this.dataSource.createQueryRunner();
    return next.handle();
  }
}

@Controller()
class LedgerController {
  private async record(req: WithRunner, tag: string) {
    await req.runner.manager.insert(Entry, { tag });
    confirm(tag);
    return { tag };
  }

  @Post('inside')
  @UseInterceptors(RunnerPerRequest)
  @Idempotent()
  inside(@Req() req: WithRunner, @Body() body: { tag: string }) {
    return this.record(req, body.tag);
  }

  @Post('outside')
  @Idempotent()
  @UseInterceptors(RunnerPerRequest)
  outside(@Req() req: WithRunner, @Body() body: { tag: string }) {
    return this.record(req, body.tag);
  }
}

describe('adversary 90 orm: a runner made inside @Idempotent() before the handler starts', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv90_orm_runner_inside_before_handler', {
      controllers: [LedgerController],
      providers: [RunnerPerRequest],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv90_inner_entries (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'inside' | 'outside', tag: string) {
    downOnce.add(tag);
    const post = () =>
      request(app.getHttpServer()).post(`/${route}`).set('Idempotency-Key', `key-${tag}`).send({
        tag,
      });
    const failed = await post();
    const retried = await post();
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv90_inner_entries WHERE tag = $1 ORDER BY id',
      [tag],
    );
    return { statuses: [failed.status, retried.status], rows: rows.map((row) => row.tag) };
  }

  it('control: the interceptor outside @Idempotent(): its runner joins, the failed try’s row rolled back, one row', async () => {
    expect(await scenario('outside', 'c1')).toEqual({ statuses: [503, 201], rows: ['c1'] });
  }, 30_000);

  it('the interceptor inside @Idempotent(): its runner joins too, one row', async () => {
    expect(await scenario('inside', 'u1')).toEqual({ statuses: [503, 201], rows: ['u1'] });
  }, 30_000);
});
