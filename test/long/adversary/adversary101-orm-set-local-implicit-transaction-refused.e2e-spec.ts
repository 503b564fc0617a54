/**
 * Fixed (session of 2026-12-06, sixth): `setsForTransaction` (lib/transaction/sql/sql-text.ts)
 * reads only the text's LAST statement: one text sent alone runs as one implicit transaction,
 * so a setting with statements after it in its text is read by them and is not refused; a
 * text that ends with a setting (alone, or after a read) is refused as before.
 *
 * Adversary 101 (orm): round 98's refusal of a `SET LOCAL` sent before the handler reads only
 * whether some statement of the text sets something for its transaction (`setsForTransaction`),
 * not whether that statement runs outside a transaction. A text of several statements sent
 * without parameters (node-postgres's simple query) runs as one implicit transaction in
 * PostgreSQL, so its `SET LOCAL` lasts to the text's end and the statements after it see it
 * (no warning: `psql -c "SET LOCAL search_path TO pg_catalog; SHOW search_path"` shows
 * pg_catalog). An interceptor's audit write that names its actor that way, for a trigger or a
 * default reading `current_setting('app.actor')`, works without the library and on every route
 * without `@Idempotent()`; on an idempotent route it is refused, 500
 * `runner_connected_outside_request`, with a reason that is false here ("where it would run
 * outside any transaction and be lost"), and every retry meets the same refusal.
 *
 * User code:
 *
 *   @Injectable() class AuditInterceptor implements NestInterceptor {
 *     constructor(private readonly tx: IdempotentTransaction) {}
 *     intercept(context, next) {
 *       return from(this.tx.manager.query(
 *         "SET LOCAL app.actor = 'alice'; INSERT INTO audit (actor) VALUES (current_setting('app.actor'))",
 *       )).pipe(switchMap(() => next.handle()));
 *     }
 *   }
 *   @Post() @UseInterceptors(AuditInterceptor) @Idempotent()
 *   async record(@Body() b) { await this.entries.insert({ tag: b.tag }); return { tag: b.tag }; }
 *
 * Code path: lib/transaction/transaction-scope.ts `refusingSessionSetsBeforeHandler`
 * (`!runner.isTransactionActive` and 'later' and `setsForTransaction(text)` true) →
 * `SessionSetBeforeHandlerError`, `store.refuseRunner` → the request rolls back.
 *
 * Docs quote: docs/reference/problems.md (`runner_connected_outside_request`): "or a `SET LOCAL`
 * / `set_config(…, true)` was sent through the DataSource before the handler started ...,
 * where it would run outside any transaction and be lost"; the round-98 file: "A `SET LOCAL`
 * outside a transaction block does nothing in PostgreSQL, so refusing it breaks no app that
 * worked."
 *
 * Severity: medium (a working app refused on every try of every key, with a wrong reason;
 * nothing written twice; workaround: `manager.transaction()` around it).
 *
 * Fails now (verified unskipped): statuses ['500 runner_connected_outside_request' twice],
 * audit rows [] (expected 201 twice and one audit row 'alice'). Control: the same audit write
 * without `SET LOCAL` in the text (the actor as a literal) runs, 201, one row.
 *
 * Suggested fix: refuse only a setting that would be lost: a text of one statement (a
 * `SET LOCAL` / `set_config(…, true)` followed by no other statement in the same text, or
 * sent with parameters, i.e. the extended protocol, which allows one statement); a setting
 * followed by statements of the same simple-query text, or after a `BEGIN` of the text's, is
 * that text's implicit (or explicit) transaction's and lasts as the code means. Or say in
 * problems.md that any text holding one is refused there, whatever follows it.
 */
import {
  Body,
  type CallHandler,
  Controller,
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

@Entity({ name: 'adv101m_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Injectable()
class AuditInterceptor implements NestInterceptor {
  constructor(private readonly tx: IdempotentTransaction) {}
  intercept(_context: unknown, next: CallHandler): Observable<unknown> {
    return from(
      this.tx.manager.query(
        "SET LOCAL app.actor = 'alice'; INSERT INTO adv101m_audit (actor) VALUES (current_setting('app.actor'))",
      ),
    ).pipe(switchMap(() => next.handle()));
  }
}

@Injectable()
class LiteralAuditInterceptor implements NestInterceptor {
  constructor(private readonly tx: IdempotentTransaction) {}
  intercept(_context: unknown, next: CallHandler): Observable<unknown> {
    return from(this.tx.manager.query("INSERT INTO adv101m_audit (actor) VALUES ('bob')")).pipe(
      switchMap(() => next.handle()),
    );
  }
}

@Controller()
class LedgerController {
  constructor(@InjectRepository(Entry) private readonly entries: Repository<Entry>) {}

  @Post('literal')
  @UseInterceptors(LiteralAuditInterceptor)
  @Idempotent()
  async literal(@Body() body: { tag: string }) {
    await this.entries.insert({ tag: body.tag });
    return { tag: body.tag };
  }

  @Post('set-local')
  @UseInterceptors(AuditInterceptor)
  @Idempotent()
  async setLocal(@Body() body: { tag: string }) {
    await this.entries.insert({ tag: body.tag });
    return { tag: body.tag };
  }
}

describe('adversary 101 orm: a SET LOCAL that its own text’s implicit transaction keeps, before the handler', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv101_orm_set_local_implicit', {
      controllers: [LedgerController],
      providers: [AuditInterceptor, LiteralAuditInterceptor],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv101m_entries (id serial PRIMARY KEY, tag text NOT NULL);
          CREATE TABLE adv101m_audit (id serial PRIMARY KEY, actor text NOT NULL);
        `);
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: string, tag: string) {
    await fixture.admin.query('DELETE FROM adv101m_audit');
    const post = () =>
      request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${tag}`)
        .send({ tag });
    const first = await post();
    const again = await post();
    const statusOf = (r: request.Response) =>
      r.status < 300 ? r.status : `${r.status} ${String((r.body as { code?: unknown }).code)}`;
    return {
      statuses: [statusOf(first), statusOf(again)],
      audit: (
        await fixture.admin.query<{ actor: string }>('SELECT actor FROM adv101m_audit ORDER BY id')
      ).rows.map((row) => row.actor),
      entries: (
        await fixture.admin.query<{ tag: string }>(
          'SELECT tag FROM adv101m_entries WHERE tag = $1',
          [tag],
        )
      ).rows.map((row) => row.tag),
    };
  }

  it('control: the audit write without SET LOCAL runs before the handler', async () => {
    expect(await scenario('literal', 'l1')).toEqual({
      statuses: [201, 201],
      audit: ['bob'],
      entries: ['l1'],
    });
  }, 30_000);

  it('a SET LOCAL its text’s implicit transaction keeps runs, as without the library', async () => {
    expect(await scenario('set-local', 's1')).toEqual({
      statuses: [201, 201],
      audit: ['alice'],
      entries: ['s1'],
    });
  }, 30_000);
});
