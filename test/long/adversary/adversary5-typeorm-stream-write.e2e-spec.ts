import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource, Entity, PrimaryColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 5: a cursor open while the request writes, on TypeORM. The pool seam
 * refuses a statement sent while a cursor of the request's is open (`CursorOpenRefusedError`,
 * data-layers.md: "the write would wait for the stream and the stream's reader for the write,
 * forever"). On TypeORM, every `createQueryRunner()` in the request's scope is now a view of
 * the one runner, on the one connection: TypeORM's own `SelectQueryBuilder.stream()` (or
 * `queryRunner.stream()`), read with a write per row through a repository, queues that write
 * behind the stream's cursor on the same connection. Without the library the stream and each
 * write have a connection of their own: 201. With it, nothing answers: the request hangs, its
 * key held (the heartbeat renews the lease), its connection held.
 */
@Entity({ name: 'items', synchronize: false })
class Item {
  @PrimaryColumn({ type: 'int' })
  n!: number;
}

@Entity({ name: 'copies', synchronize: false })
class Copy {
  @PrimaryColumn({ type: 'text' })
  tag!: string;

  @PrimaryColumn({ type: 'int' })
  n!: number;
}

@Controller()
class CopyController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('copy')
  @Idempotent()
  idempotent(@Body() body: { tag: string }) {
    return this.copy(body.tag);
  }

  @Post('plain/copy')
  plain(@Body() body: { tag: string }) {
    return this.copy(body.tag);
  }

  /** TypeORM's stream of a query builder, a write per streamed row. */
  private async copy(tag: string) {
    const stream = await this.dataSource
      .getRepository(Item)
      .createQueryBuilder('item')
      .select('item.n', 'n')
      .orderBy('item.n')
      .stream();
    let copied = 0;
    for await (const row of stream as AsyncIterable<{ n: number }>) {
      await this.dataSource.getRepository(Copy).insert({ tag, n: row.n });
      copied++;
    }
    return { tag, copied };
  }
}

describe('adversary 5: TypeORM stream() with a write per row', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv5_typeorm_stream', {
      controllers: [CopyController],
      entities: [Item, Copy],
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE items (n int PRIMARY KEY);
          INSERT INTO items SELECT generate_series(1, 500);
          CREATE TABLE copies (tag text NOT NULL, n int NOT NULL, PRIMARY KEY (tag, n));`);
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(async () => {
    await admin?.end();
    // The database first: its drop ends the connection a hung request holds, which app.close()
    // would wait for.
    await fixture?.database.drop();
    await app?.close();
  });

  const copies = async (tag: string) =>
    Number((await admin.query('SELECT count(*) FROM copies WHERE tag = $1', [tag])).rows[0].count);

  it('without the library: 201, every row copied (the control)', async () => {
    const response = await request(app.getHttpServer()).post('/plain/copy').send({ tag: 'plain' });
    expect({ status: response.status, copied: await copies('plain') }).toEqual({
      status: 201,
      copied: 500,
    });
  });

  it('with it: an answer within 10 s (copied and stored, or refused as on the pool seam), no hang', async () => {
    const answer = request(app.getHttpServer())
      .post('/copy')
      .set('Idempotency-Key', 'copy-1')
      .send({ tag: 'idempotent' })
      .then((response) => ({ status: response.status, body: response.body as unknown }));
    const outcome = await Promise.race([
      answer,
      new Promise<'no answer'>((resolve) => setTimeout(() => resolve('no answer'), 10_000)),
    ]);
    // Either the pool seam's outcome (500 cursor_open, nothing kept) or the copy (201, 500 rows).
    if (outcome === 'no answer') {
      // What a client's retry meets meanwhile: the key held.
      const retry = await request(app.getHttpServer())
        .post('/copy')
        .set('Idempotency-Key', 'copy-1')
        .send({ tag: 'idempotent' });
      expect({ outcome, retry: retry.status }).toEqual({ outcome: 'an answer', retry: 201 });
    }
    const status = (outcome as { status: number }).status;
    expect([201, 500]).toContain(status);
    expect(await copies('idempotent')).toBe(status === 201 ? 500 : 0);
  }, 30_000);
});
