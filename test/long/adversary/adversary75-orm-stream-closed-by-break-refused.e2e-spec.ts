/**
 * Adversary 75: on TypeORM, a handler that reads a stream until it has what it needs and
 * leaves the loop (`break` out of `for await`, which destroys the stream and closes its
 * cursor), then writes, is refused with `CursorOpenRefusedError` (500 `cursor_open`) on every
 * try: the stream is still counted open. Without the library the write simply runs after the
 * cursor's close on the same connection: 201, the row.
 *
 *   await dataSource.transaction(async (manager) => {
 *     const stream = await manager.queryRunner!.stream('SELECT id FROM adv75c_items ORDER BY id');
 *     for await (const row of stream) { first = row; break; }   // closes the stream
 *     await manager.query('INSERT INTO adv75c_rows (tag, first) VALUES ($1, $2)', [tag, first.id]);
 *   });
 *
 * Why: `OpenStreams.watch` (lib/data-layers/open-streams.ts) counts a stream open "until
 * node-postgres says it ended (read to its end, or closed: its portal closed, the connection
 * ready again)": it waits for the submittable's `handleReadyForQuery`. Leaving the loop calls
 * the stream's `destroy()`, and pg-query-stream's `_destroy` calls `cursor.close()`, which sends
 * the portal's Close and a Sync at once; the ReadyForQuery that ends it arrives a round trip
 * later. The write sent right after the loop meets `LazyTransaction.refuseBehindStream` in
 * `queryFrom` before that: refused, the request with it. It would not have waited for any
 * reader: node-postgres queues it behind the close, which needs nothing from the app.
 *
 * Expected (docs/guides/transactions.md, "One request, one connection"): "Read the stream to its
 * end (or close it) before writing". The handler closed it (Node's own way to close a
 * readable: leave its async iterator), and the refusal is for a statement "that would wait
 * for the stream, and the stream's reader for it", which this one does not.
 *
 * Control: without `@Idempotent()` (201, the row), and the same keyed handler that reads the
 * stream to its end before writing (201, the row).
 *
 * Severity: medium (a false refusal of documented, correct code: every retry meets the same
 * 500 `cursor_open`, the key's work never done).
 *
 * Fails now: expect(received).toEqual(expected): Expected {"code": undefined, "status": 201},
 * Received {"code": "cursor_open", "status": 500}, for the nested transaction's
 * `queryRunner.stream()` and for a query builder's `stream()` at the handler's top level.
 * The two controls pass.
 *
 * Suggested fix: count a stream ended when its close is asked (wrap `close()` of the cursor,
 * or the stream's `destroy`/`'close'`), as what is sent after it then waits only for that
 * close; or, when a statement meets a stream whose close is under way, wait for that close
 * instead of refusing.
 *
 * Fixed: `OpenStreams.watch` (lib/data-layers/open-streams.ts) also wraps the cursor's
 * `close()` (the stream's own, or the pg-cursor a pg-query-stream wraps): a submitted stream
 * whose close is asked counts as ended at once (its Close and Sync are sent then), and the
 * statement after it is not refused: node-postgres queues it behind the close's ReadyForQuery.
 * A cursor closed while still in node-postgres' queue (never submitted) still counts open.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource, type EntityManager } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body75 = { tag: string; how: 'nested-break' | 'builder-break' | 'nested-end' };

@Injectable()
class ItemsService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async firstOf(stream: AsyncIterable<unknown>, toEnd: boolean) {
    let first: { id: number } | undefined;
    for await (const row of stream) {
      first ??= row as { id: number };
      if (!toEnd) break;
    }
    return first!.id;
  }

  private write(manager: EntityManager | DataSource, tag: string, first: number) {
    return manager.query('INSERT INTO adv75c_rows (tag, first) VALUES ($1, $2)', [tag, first]);
  }

  async run(body: Body75) {
    if (body.how === 'builder-break') {
      const stream = await this.dataSource
        .createQueryBuilder()
        .select('i.id', 'id')
        .from('adv75c_items', 'i')
        .orderBy('i.id')
        .stream();
      await this.write(this.dataSource, body.tag, await this.firstOf(stream, false));
      return { tag: body.tag };
    }
    await this.dataSource.transaction(async (manager) => {
      const stream = await manager.queryRunner!.stream('SELECT id FROM adv75c_items ORDER BY id');
      const first = await this.firstOf(stream, body.how === 'nested-end');
      await this.write(manager, body.tag, first);
    });
    return { tag: body.tag };
  }
}

@Controller()
class ItemsController {
  constructor(private readonly items: ItemsService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body75) {
    return this.items.run(body);
  }

  @Post('plain')
  plain(@Body() body: Body75) {
    return this.items.run(body);
  }
}

describe('adversary 75: TypeORM, a stream closed by leaving its loop, then a write', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75_orm_stream_break', {
      controllers: [ItemsController],
      providers: [ItemsService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv75c_items (id int PRIMARY KEY); INSERT INTO adv75c_items SELECT generate_series(1, 500)',
        );
        await admin.query(
          'CREATE TABLE adv75c_rows (id serial PRIMARY KEY, tag text NOT NULL, first int NOT NULL)',
        );
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await admin.query<{ first: number }>('SELECT first FROM adv75c_rows WHERE tag = $1', [tag])
    ).rows.map((row) => row.first);

  const post = (path: string, key: string | undefined, body: Body75) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), leaving the loop then writing: 201, the row', async () => {
    for (const how of ['nested-break', 'builder-break'] as const) {
      const tag = `p-${how}`;
      expect((await post('/plain', undefined, { tag, how })).status).toBe(201);
      expect(await kept(tag)).toEqual([1]);
    }
  }, 20_000);

  it('control: keyed, the stream read to its end before the write: 201, the row', async () => {
    expect((await post('/keyed', 'k-end', { tag: 'k-end', how: 'nested-end' })).status).toBe(201);
    expect(await kept('k-end')).toEqual([1]);
  }, 20_000);

  for (const how of ['nested-break', 'builder-break'] as const) {
    it(`keyed, ${how}: the stream closed, the write runs (201, the row)`, async () => {
      const tag = `k-${how}`;
      const answer = await post('/keyed', tag, { tag, how });
      expect({ status: answer.status, code: answer.body.code as unknown }).toEqual({
        status: 201,
        code: undefined,
      });
      expect(await kept(tag)).toEqual([1]);
    }, 20_000);
  }
});
