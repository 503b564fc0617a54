import {
  All,
  Controller,
  Head,
  Headers,
  HttpCode,
  type INestApplication,
  Module,
  Post,
  Res,
  StreamableFile,
} from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { type AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { Client } from 'pg';
import { type DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../lib/index.js';
import { ADAPTERS, type AdapterName, bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { SIDE_EFFECTS_DDL } from './support/test-app.js';

const CSV = ['id,name\n', '1,alpha\n', '2,beta\n'];
const DISPOSITION = 'attachment; filename="rows.csv"';

/**
 * Keys whose first attempt fails: the handler's stream breaks after two rows, as a file or a
 * cursor that fails midway; the retry's stream completes.
 */
const failFirst = new Set<string>();
const attempts = new Map<string, number>();

/** The rows of the CSV, read one at a time; the third read fails when `fail`. */
function csv(fail: boolean): Readable {
  async function* rows() {
    yield Buffer.from(CSV[0]);
    yield Buffer.from(CSV[1]);
    // A pause, so that the first rows are written before the failure.
    await new Promise((resolve) => setTimeout(resolve, 30));
    if (fail) throw new Error('the disk went away');
    yield Buffer.from(CSV[2]);
  }
  return Readable.from(rows(), { objectMode: false });
}

/** Whether this attempt of `key` fails (the first one, for a key in `failFirst`). */
function failsNow(key: string): boolean {
  const n = (attempts.get(key) ?? 0) + 1;
  attempts.set(key, n);
  return n === 1 && failFirst.has(key);
}

interface WritableReply {
  status(code: number): WritableReply;
  header(name: string, value: string): WritableReply;
  send(body: unknown): void;
}

/** Each handler records a side effect in the request's transaction: a rollback removes it. */
@Controller()
class StreamsController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async record(route: string): Promise<number> {
    const rows = (await this.dataSource.query(
      'INSERT INTO side_effects (route) VALUES ($1) RETURNING id',
      [route],
    )) as { id: number }[];
    return rows[0].id;
  }

  @Post('json')
  @Idempotent()
  async json() {
    return { id: await this.record('json'), kind: 'json' };
  }

  @Post('file')
  @Idempotent()
  async file(@Headers('idempotency-key') key: string) {
    await this.record('file');
    return new StreamableFile(csv(failsNow(key)), { type: 'text/csv' });
  }

  /** A download: its `Content-Disposition` kept with the stored response (`replayHeaders`). */
  @Post('download')
  @Idempotent({ replayHeaders: ['Content-Disposition'] })
  async download(@Headers('idempotency-key') key: string) {
    await this.record('download');
    return new StreamableFile(csv(failsNow(key)), { type: 'text/csv', disposition: DISPOSITION });
  }

  /**
   * A statement that fails inside a savepoint of its own (raw SQL), rolled back to it, then a
   * stream that fails midway: the transaction was no longer aborted.
   */
  @Post('recovered-file')
  @Idempotent()
  async recoveredFile(@Headers('idempotency-key') key: string) {
    await this.record('recovered-file');
    await this.dataSource.query('SAVEPOINT mine');
    await this.dataSource.query('SELECT 1/0').catch(() => undefined);
    await this.dataSource.query('ROLLBACK TO SAVEPOINT mine');
    return new StreamableFile(csv(failsNow(key)), { type: 'text/csv' });
  }

  /** A statement it lets fail (and goes on), then a stream that fails midway. */
  @Post('aborted-file')
  @Idempotent()
  async abortedFile(@Headers('idempotency-key') key: string) {
    await this.record('aborted-file');
    await this.dataSource.query('SELECT 1/0').catch(() => undefined);
    return new StreamableFile(csv(failsNow(key)), { type: 'text/csv' });
  }

  /** Stores at most 10 bytes: the two rows sent before a failure are more. */
  @Post('small-file')
  @Idempotent({ maxResponseBytes: 10 })
  async smallFile(@Headers('idempotency-key') key: string) {
    await this.record('small-file');
    return new StreamableFile(csv(failsNow(key)), { type: 'text/csv' });
  }

  /** Fastify sends a Readable a handler returns as a stream (Express would serialize it). */
  @Post('readable')
  @Idempotent()
  async readable(@Headers('idempotency-key') key: string) {
    await this.record('readable');
    return csv(failsNow(key));
  }

  @Post('own')
  @Idempotent()
  async own(@Res() reply: WritableReply) {
    const id = await this.record('own');
    reply.status(200).header('content-type', 'text/plain; charset=utf-8').send(`own ${id}`);
  }

  @Post('passthrough')
  @Idempotent()
  async passthrough(@Res({ passthrough: true }) reply: WritableReply) {
    reply.status(202);
    return { id: await this.record('passthrough') };
  }

  @Post('no-content')
  @Idempotent()
  @HttpCode(204)
  async noContent() {
    await this.record('no-content');
  }

  @Post('empty')
  @Idempotent()
  @HttpCode(200)
  async empty() {
    await this.record('empty');
  }

  /** Every method, HEAD among them, reaches this route. */
  @All('any')
  @Idempotent()
  async any() {
    return { id: await this.record('any') };
  }
}

@Controller()
class HeadController {
  @Head('head')
  @Idempotent()
  head() {
    return undefined;
  }
}

function appModule(url: string, controller: new (...args: never[]) => unknown) {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url,
        migrations: IDEMPOTENCY_MIGRATIONS,
        migrationsRun: true,
        logging: false,
      }),
      IdempotencyModule.forRoot({ tenant: () => '1' }),
    ],
    controllers: [controller],
  })
  class StreamsAppModule {}
  return StreamsAppModule;
}

interface Answer {
  status: number;
  headers: Headers;
  body: Buffer;
}

describe.each(ADAPTERS)('response bodies on %s', (adapter: AdapterName) => {
  let database: TestDatabase;
  let db: Client;
  let app: INestApplication;
  let base: string;
  let n = 0;
  const newKey = () => `stream-${adapter}-${++n}-${Date.now()}`;

  beforeAll(async () => {
    database = await createTestDatabase(`streams_${adapter}`);
    db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(SIDE_EFFECTS_DDL);
    app = await bootstrapTestApp(appModule(database.url, StreamsController), adapter);
    await app.listen(0, '127.0.0.1');
    base = `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await app?.close();
    await db?.end();
    await database?.drop();
  });

  const call = async (path: string, key: string, method = 'POST'): Promise<Answer> => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { 'idempotency-key': key },
    });
    return { status: res.status, headers: res.headers, body: Buffer.from(await res.arrayBuffer()) };
  };
  const sideEffects = async (route: string) =>
    Number(
      (
        await db.query<{ n: string }>('SELECT count(*) AS n FROM side_effects WHERE route = $1', [
          route,
        ])
      ).rows[0].n,
    );
  const stored = async (key: string) =>
    (
      await db.query<{
        state: string;
        response_code: number | null;
        response_body: Buffer | null;
      }>('SELECT state, response_code, response_body FROM idempotency_keys WHERE key = $1', [key])
    ).rows;

  /** The first answer is stored as sent, and every replay is the same bytes. */
  async function expectStoredAndReplayed(
    path: string,
    key: string,
    first: Answer,
    route: string,
    method = 'POST',
  ) {
    expect(await stored(key)).toEqual([
      { state: 'done', response_code: first.status, response_body: first.body },
    ]);
    const again = await call(path, key, method);
    expect(again.status).toBe(first.status);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('content-type')).toBe(first.headers.get('content-type'));
    expect(again.body.equals(first.body)).toBe(true);
    expect(await sideEffects(route)).toBe(1);
  }

  it('JSON: stored and replayed byte for byte', async () => {
    const key = newKey();
    const first = await call('/json', key);
    expect(first.status).toBe(201);
    expect(JSON.parse(first.body.toString())).toMatchObject({ kind: 'json' });
    await expectStoredAndReplayed('/json', key, first, 'json');
  });

  it('a StreamableFile that completes: its whole body stored and replayed', async () => {
    const key = newKey();
    const first = await call('/file', key);
    expect(first.status).toBe(201);
    expect(first.headers.get('content-type')).toBe('text/csv');
    expect(first.body.toString()).toBe(CSV.join(''));
    await expectStoredAndReplayed('/file', key, first, 'file');
  });

  it('a StreamableFile that fails midway: rolled back, nothing stored; the retry runs and gets the whole file', async () => {
    const key = newKey();
    failFirst.add(key);
    const before = await sideEffects('file');
    const first = await call('/file', key);
    expect(first.status).toBe(503);
    expect(first.headers.get('content-type')).toBe('application/problem+json');
    expect(first.headers.get('retry-after')).toBe('1');
    expect(JSON.parse(first.body.toString())).toMatchObject({
      status: 503,
      code: 'retry_later',
      detail:
        'The response stream failed before it was complete; nothing was stored. Retry with the ' +
        'same key.',
    });
    // Nothing of the attempt stays: no response, no effect, and the key is free at once.
    expect(await stored(key)).toEqual([
      { state: 'started', response_code: null, response_body: null },
    ]);
    expect(await sideEffects('file')).toBe(before);

    const retry = await call('/file', key);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(retry.body.toString()).toBe(CSV.join(''));
    expect(attempts.get(key)).toBe(2);
    expect(await sideEffects('file')).toBe(before + 1);
    const replay = await call('/file', key);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.equals(retry.body)).toBe(true);
    expect(attempts.get(key)).toBe(2);
  });

  it('a stream that fails over a transaction its code aborted: 500 transaction_aborted (what every retry meets), not 503', async () => {
    const key = newKey();
    failFirst.add(key);
    const answers = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const answer = await call('/aborted-file', key);
      answers.push({
        status: answer.status,
        retryAfter: answer.headers.get('retry-after'),
        code: (JSON.parse(answer.body.toString()) as { code: string }).code,
      });
    }
    expect(answers).toEqual([
      { status: 500, retryAfter: null, code: 'transaction_aborted' },
      { status: 500, retryAfter: null, code: 'transaction_aborted' },
    ]);
    expect(await sideEffects('aborted-file')).toBe(0);
  });

  it('a stream that fails after a failure its code rolled back to its own savepoint: 503, and the retry gets the file', async () => {
    // Fuzzer (pool seam): `tx(tx(fail:throw)?)? stream:fails-once` answered 500 transaction_aborted.
    const key = newKey();
    failFirst.add(key);
    const first = await call('/recovered-file', key);
    expect(first.status).toBe(503);
    expect(first.headers.get('retry-after')).toBe('1');
    const retry = await call('/recovered-file', key);
    expect(retry.status).toBe(201);
    expect(await sideEffects('recovered-file')).toBe(1);
  });

  it('a download: its Content-Disposition replayed; when it fails midway, the 503 in its place carries none', async () => {
    const key = newKey();
    failFirst.add(key);
    const first = await call('/download', key);
    expect(first.status).toBe(503);
    expect(first.headers.get('content-type')).toBe('application/problem+json');
    // Not the file's: a browser would save the problem as rows.csv.
    expect(first.headers.get('content-disposition')).toBeNull();
    const retry = await call('/download', key);
    expect(retry.status).toBe(201);
    expect(retry.headers.get('content-disposition')).toBe(DISPOSITION);
    expect(retry.body.toString()).toBe(CSV.join(''));
    const replay = await call('/download', key);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('content-disposition')).toBe(DISPOSITION);
    expect(replay.body.equals(retry.body)).toBe(true);
    expect(await sideEffects('download')).toBe(1);
  });

  it('a StreamableFile that fails past maxResponseBytes: 500 response_too_large, stored (whole, it was too large too)', async () => {
    const key = newKey();
    failFirst.add(key);
    const first = await call('/small-file', key);
    expect(first.status).toBe(500);
    expect(first.headers.get('content-type')).toBe('application/problem+json');
    expect(JSON.parse(first.body.toString())).toMatchObject({
      status: 500,
      code: 'response_too_large',
    });
    expect(await sideEffects('small-file')).toBe(0);
    const [row] = await stored(key);
    expect(row).toEqual({ state: 'done', response_code: 500, response_body: first.body });
    const again = await call('/small-file', key);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body.equals(first.body)).toBe(true);
    expect(attempts.get(key)).toBe(1);
  });

  it('@Res() without passthrough (the handler writes itself): stored and replayed', async () => {
    const key = newKey();
    const first = await call('/own', key);
    expect(first.status).toBe(200);
    expect(first.body.toString()).toMatch(/^own \d+$/);
    await expectStoredAndReplayed('/own', key, first, 'own');
  });

  it('@Res({ passthrough: true }): its status and the returned body stored and replayed', async () => {
    const key = newKey();
    const first = await call('/passthrough', key);
    expect(first.status).toBe(202);
    expect(JSON.parse(first.body.toString())).toEqual({ id: expect.any(Number) });
    await expectStoredAndReplayed('/passthrough', key, first, 'passthrough');
  });

  it('a 204: stored with an empty body, replayed without Content-Length', async () => {
    const key = newKey();
    const first = await call('/no-content', key);
    expect(first.status).toBe(204);
    expect(first.body.length).toBe(0);
    await expectStoredAndReplayed('/no-content', key, first, 'no-content');
    expect((await call('/no-content', key)).headers.get('content-length')).toBeNull();
  });

  it('a 200 with no body: stored empty, replayed with Content-Length 0', async () => {
    const key = newKey();
    const first = await call('/empty', key);
    expect(first.status).toBe(200);
    expect(first.body.length).toBe(0);
    await expectStoredAndReplayed('/empty', key, first, 'empty');
    expect((await call('/empty', key)).headers.get('content-length')).toBe('0');
  });

  it('HEAD on an @All() route: claimed and run like any method; no body sent, first or replayed', async () => {
    const key = newKey();
    const first = await call('/any', key, 'HEAD');
    expect(first.status).toBe(200);
    expect(first.body.length).toBe(0);
    const [row] = await stored(key);
    expect(row.state).toBe('done');
    expect(row.response_code).toBe(200);
    // Express writes no body for a HEAD; Fastify writes the GET's, which Node does not send.
    const body = row.response_body!.toString();
    if (adapter === 'express') expect(body).toBe('');
    else expect(JSON.parse(body)).toEqual({ id: expect.any(Number) });
    const again = await call('/any', key, 'HEAD');
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('content-type')).toBe(first.headers.get('content-type'));
    // The first answer announces the length of the body a GET would carry; the replay, whose
    // stored headers do not keep it (and on Express whose stored body is empty), announces none.
    const [effect] = (
      await db.query<{ id: number }>("SELECT id FROM side_effects WHERE route = 'any'")
    ).rows;
    expect(first.headers.get('content-length')).toBe(String(JSON.stringify(effect).length));
    expect(again.headers.get('content-length')).toBeNull();
    expect(again.body.length).toBe(0);
    expect(await sideEffects('any')).toBe(1);
    // The fingerprint holds the method: the same key on a POST is another request.
    expect((await call('/any', key, 'POST')).status).toBe(422);
  });
});

describe('a stream a Fastify handler returns', () => {
  let database: TestDatabase;
  let db: Client;
  let app: INestApplication;
  let base: string;

  beforeAll(async () => {
    database = await createTestDatabase('streams_readable');
    db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(SIDE_EFFECTS_DDL);
    app = await bootstrapTestApp(appModule(database.url, StreamsController), 'fastify');
    await app.listen(0, '127.0.0.1');
    base = `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await app?.close();
    await db?.end();
    await database?.drop();
  });

  const call = async (key: string) => {
    const res = await fetch(`${base}/readable`, {
      method: 'POST',
      headers: { 'idempotency-key': key },
    });
    return { status: res.status, headers: res.headers, body: Buffer.from(await res.arrayBuffer()) };
  };
  const count = async () =>
    Number(
      (
        await db.query<{ n: string }>(
          "SELECT count(*) AS n FROM side_effects WHERE route = 'readable'",
        )
      ).rows[0].n,
    );

  it('completes: its whole body stored and replayed', async () => {
    const key = `readable-ok-${Date.now()}`;
    const first = await call(key);
    expect(first.status).toBe(201);
    expect(first.body.toString()).toBe(CSV.join(''));
    const again = await call(key);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body.equals(first.body)).toBe(true);
  });

  it('fails midway: rolled back, nothing stored; the retry runs and gets the whole body', async () => {
    const key = `readable-fails-${Date.now()}`;
    failFirst.add(key);
    const before = await count();
    const first = await call(key);
    expect(first.status).toBe(503);
    expect(JSON.parse(first.body.toString())).toMatchObject({ code: 'retry_later' });
    const { rows } = await db.query(
      'SELECT state, response_code FROM idempotency_keys WHERE key = $1',
      [key],
    );
    expect(rows).toEqual([{ state: 'started', response_code: null }]);
    expect(await count()).toBe(before);
    const retry = await call(key);
    expect(retry.status).toBe(201);
    expect(retry.body.toString()).toBe(CSV.join(''));
    expect(await count()).toBe(before + 1);
  });
});

describe('HEAD with @Idempotent()', () => {
  it('is refused at start-up, saying why', async () => {
    const database = await createTestDatabase('streams_head');
    try {
      await expect(bootstrapTestApp(appModule(database.url, HeadController))).rejects.toThrow(
        "@Idempotent() on HeadController.head: HEAD is safe by HTTP's definition",
      );
    } finally {
      await database.drop();
    }
  });
});
