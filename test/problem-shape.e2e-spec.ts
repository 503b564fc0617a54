import {
  Body,
  Controller,
  type INestApplication,
  Module,
  Post,
  Query,
  UseFilters,
} from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyErrorFilter,
  IdempotencyModule,
  type IdempotencyModuleBaseOptions,
  Idempotent,
  type Problem,
  RetryLaterError,
} from '../lib/index.js';
import { type AdapterName, ADAPTERS, bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { TcpProxy } from './support/tcp-proxy.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Holds the `gated` handler until the test opens the gate, so that the test can cut the
 * database between the handler and the commit of its answer.
 */
class Gate {
  private open?: () => void;
  entered?: Promise<void>;
  private enter?: () => void;
  private opened?: Promise<void>;

  arm(): void {
    this.entered = new Promise((resolve) => (this.enter = resolve));
    this.opened = new Promise((resolve) => (this.open = resolve));
  }

  async pass(): Promise<void> {
    this.enter?.();
    await this.opened;
  }

  release(): void {
    this.open?.();
  }
}

const gate = new Gate();
/** Holds a request (`?hold=1`, which the fingerprint leaves out) while another one comes. */
const held = new Gate();

@Controller()
class ShapeController {
  @Post('orders')
  @Idempotent()
  async order(@Body() body: { delayMs?: number }, @Query('hold') hold?: string) {
    if (body.delayMs) await sleep(body.delayMs);
    if (hold) await held.pass();
    return { ok: true };
  }

  /** No database work of its own: the commit is the first statement the request needs. */
  @Post('gated')
  @Idempotent()
  async gated() {
    await gate.pass();
    return { ok: true };
  }

  /** Outlives its lease: another request takes it over, and its own commit is fenced off. */
  @Post('slow')
  @Idempotent({ leaseMs: 500, heartbeat: false })
  async slow(@Query('hold') hold?: string) {
    if (hold) await held.pass();
    return { ok: true };
  }

  @Post('sized')
  @Idempotent({ maxResponseBytes: 64 })
  sized() {
    return { pad: 'x'.repeat(200) };
  }

  /** Not idempotent: the library's error reaches the client through IdempotencyErrorFilter. */
  @Post('webhook')
  @UseFilters(IdempotencyErrorFilter)
  webhook() {
    throw new RetryLaterError('The ledger is busy', 3);
  }
}

/** The problems' titles, which the Nest shape puts in `error`. */
const TITLES: Record<string, string> = {
  key_missing: 'Idempotency key missing',
  key_invalid: 'Idempotency key invalid',
  key_mismatch: 'Idempotency key reused',
  key_in_progress: 'Request in progress',
  lease_lost: 'Idempotency lease lost',
  store_unavailable: 'Idempotency store unavailable',
  response_too_large: 'Response too large to store',
  retry_later: 'Retry later',
};

/** The messages (the problems' `detail`), which both shapes carry. */
const MESSAGES: Record<string, string> = {
  key_missing: 'The Idempotency-Key header is required on this route; send one key per operation.',
  key_invalid: 'The Idempotency-Key header is invalid: it is longer than 255 characters.',
  key_mismatch:
    'This idempotency key was already used with a different request (method, path or body); ' +
    'use a new key for a new operation.',
  key_in_progress: 'A request with this idempotency key is still being processed; retry later.',
  lease_lost:
    'This request lost its claim on the idempotency key to another worker; ' +
    'retry to receive the stored result.',
  store_unavailable:
    'The idempotency store became unavailable before the response could be stored. ' +
    'Retry later with the same key: completed atomic phases are not run again.',
  response_too_large:
    "The response is larger than this route's maxResponseBytes (64 bytes): it cannot " +
    'be stored for replays, so nothing of the request was committed.',
  retry_later: 'The ledger is busy',
};

/** Nest's own error shape, as `HttpException` answers by default. */
const nestShape = {
  name: 'Nest default',
  render: (problem: Problem) => ({
    body: { statusCode: problem.status, message: problem.body.detail, error: problem.body.title },
  }),
  expected: (status: number, code: string, message: string) => ({
    statusCode: status,
    message,
    error: TITLES[code],
    code,
  }),
};

/** Stripe's: clients throw on any body with an `error` member. */
const stripeShape = {
  name: 'Stripe-like',
  render: (problem: Problem) => ({
    body: {
      error: {
        type: problem.status >= 500 ? 'api_error' : 'idempotency_error',
        code: problem.body.code,
        message: problem.body.detail,
      },
    },
  }),
  expected: (status: number, code: string, message: string) => ({
    error: { type: status >= 500 ? 'api_error' : 'idempotency_error', code, message },
  }),
};

/** Whether a shaped body carries `code`, wherever the shape puts it. */
function codeOf(body: Record<string, unknown>): unknown {
  const error = body.error as Record<string, unknown> | undefined;
  return typeof error === 'object' ? error.code : body.code;
}

describe.each(ADAPTERS)('the library’s answers in the app’s own shape on %s', (adapter) => {
  describe.each([nestShape, stripeShape])('$name', (shape) => {
    let database: TestDatabase;
    let proxy: TcpProxy;
    let app: INestApplication;

    beforeAll(async () => {
      database = await createTestDatabase(`shape_${adapter}`);
      const target = new URL(database.url);
      proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
      await proxy.start();
      const viaProxy = new URL(database.url);
      viaProxy.hostname = '127.0.0.1';
      viaProxy.port = String(proxy.port);
      app = await createShapeApp(viaProxy.toString(), adapter, {
        // The Nest shape keeps the code next to Nest's three members, to be asserted.
        renderProblem:
          shape === nestShape
            ? (problem) => ({
                body: { ...nestShape.render(problem).body, code: problem.body.code },
              })
            : shape.render,
      });
    });
    afterAll(async () => {
      gate.release();
      held.release();
      await app?.close();
      await proxy?.stop();
      await database?.drop();
    });

    const post = (path: string, key: string | undefined, body: object = {}) => {
      const req = request(app.getHttpServer()).post(path).set('X-Tenant-Id', '1');
      if (key !== undefined) req.set('Idempotency-Key', key);
      return req.send(body);
    };
    const label = (name: string) => `${shape.name.replace(/\W/g, '')}-${adapter}-${name}`;

    /** Every shaped answer is JSON in the app's shape, never problem+json. */
    function expectShaped(res: request.Response, status: number, code: string) {
      expect(res.status).toBe(status);
      expect(res.headers['content-type']).toMatch(/^application\/json/);
      expect(res.body).toEqual(shape.expected(status, code, MESSAGES[code]));
      expect(codeOf(res.body as Record<string, unknown>)).toBe(code);
    }

    it('a missing key: 400 key_missing', async () => {
      expectShaped(await post('/orders', undefined), 400, 'key_missing');
    });

    it('an invalid key: 400 key_invalid', async () => {
      expectShaped(await post('/orders', 'k'.repeat(256)), 400, 'key_invalid');
    });

    it('a key reused with another body: 422 key_mismatch', async () => {
      const key = label('mismatch');
      expect((await post('/orders', key, { a: 1 })).status).toBe(201);
      expectShaped(await post('/orders', key, { a: 2 }), 422, 'key_mismatch');
    });

    it('a key still in progress: 409 key_in_progress, Retry-After kept', async () => {
      const key = label('progress');
      held.arm();
      const first = post('/orders?hold=1', key).then((res) => res);
      await held.entered; // the first holds the key until the second has its answer
      const second = await post('/orders', key);
      held.release();
      expectShaped(second, 409, 'key_in_progress');
      expect(Number(second.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      expect((await first).status).toBe(201);
    });

    it('the store failed at commit: 503 store_unavailable, Retry-After kept', async () => {
      const key = label('commit');
      gate.arm();
      const answer = post('/gated', key).then((res) => res);
      await gate.entered;
      await proxy.refuse();
      gate.release();
      const res = await answer;
      await proxy.restore();
      expectShaped(res, 503, 'store_unavailable');
      expect(res.headers['retry-after']).toBe('1');
    });

    it('a lease lost before the commit: 409 lease_lost', async () => {
      const key = label('lease');
      // The hold is in the query, which the fingerprint leaves out: one request, two runs.
      held.arm();
      const stale = post('/slow?hold=1', key).then((res) => res);
      await held.entered;
      // Until the lease (500 ms) has run out, the key is in progress; then this one takes it
      // over while the stale handler is still held, which it is until the owner has answered.
      const deadline = Date.now() + 10_000;
      let owner = await post('/slow', key);
      while (owner.status === 409 && Date.now() < deadline) {
        expectShaped(owner, 409, 'key_in_progress');
        await sleep(100);
        owner = await post('/slow', key);
      }
      expect(owner.status).toBe(201);
      held.release();
      expectShaped(await stale, 409, 'lease_lost');
    });

    it('a response too large to store: 500 response_too_large, replayed byte for byte', async () => {
      const key = label('large');
      const first = await post('/sized', key).buffer(true);
      expectShaped(first, 500, 'response_too_large');
      const replay = await post('/sized', key).buffer(true);
      expect(replay.status).toBe(500);
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.headers['content-type']).toBe(first.headers['content-type']);
      expect(replay.text).toBe(first.text);
    });

    it('an error answered by IdempotencyErrorFilter: 503 retry_later, Retry-After kept', async () => {
      const res = await post('/webhook', undefined);
      expectShaped(res, 503, 'retry_later');
      expect(res.headers['retry-after']).toBe('3');
    });
  });

  /**
   * A renderer whose body JSON.stringify cannot write (a BigInt: it throws; a cycle too). The
   * client still gets the library's own problem, and the request's transaction is ended, on
   * every path that renders a problem.
   */
  describe.each([
    ['a BigInt', (code: string) => ({ code, amount: 1n })],
    [
      'a cycle',
      (code: string) => {
        const body: Record<string, unknown> = { code };
        body.self = body;
        return body;
      },
    ],
  ])('a renderProblem whose body JSON cannot write (%s)', (_what, unwritable) => {
    let database: TestDatabase;
    let proxy: TcpProxy;
    let app: INestApplication;
    let db: Client;

    beforeAll(async () => {
      database = await createTestDatabase(`shape_unwritable_${adapter}`);
      const target = new URL(database.url);
      proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
      await proxy.start();
      const viaProxy = new URL(database.url);
      viaProxy.hostname = '127.0.0.1';
      viaProxy.port = String(proxy.port);
      app = await createShapeApp(viaProxy.toString(), adapter, {
        renderProblem: (problem) => ({ body: unwritable(problem.body.code) }),
      });
      db = new Client({ connectionString: database.url });
      await db.connect();
    });
    afterAll(async () => {
      gate.release();
      held.release();
      await app?.close();
      await db?.end();
      await proxy?.stop();
      await database?.drop();
    });

    let n = 0;
    const label = (name: string) => `unwritable-${adapter}-${name}-${++n}`;
    const post = (path: string, key: string | undefined, body: object = {}) => {
      const req = request(app.getHttpServer()).post(path).timeout(15_000);
      if (key !== undefined) req.set('Idempotency-Key', key);
      return req.send(body);
    };
    /** The library's own problem: what the client gets when the app's shape cannot be written. */
    function expectProblem(res: request.Response, status: number, code: string) {
      expect(res.status).toBe(status);
      expect(res.headers['content-type']).toMatch('application/problem+json');
      expect(res.body).toMatchObject({ type: `urn:idempotency:${code}`, status, code });
    }
    /** No session of the app's is left inside a transaction. */
    async function expectNoOpenTransaction() {
      const deadline = Date.now() + 5000;
      let open = 1;
      while (Date.now() < deadline) {
        const { rows } = await db.query<{ n: string }>(
          `SELECT count(*) AS n FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid()
              AND state LIKE 'idle in transaction%'`,
        );
        open = Number(rows[0].n);
        if (open === 0) break;
        await sleep(50);
      }
      expect(open).toBe(0);
    }

    it('a response too large to store: 500 response_too_large, stored, the transaction ended, the retry replayed', async () => {
      const key = label('large');
      const first = await post('/sized', key);
      expectProblem(first, 500, 'response_too_large');
      await expectNoOpenTransaction();
      const replay = await post('/sized', key);
      expect(replay.status).toBe(500);
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.text).toBe(first.text);
    });

    it('a missing key: 400 key_missing', async () => {
      expectProblem(await post('/orders', undefined), 400, 'key_missing');
    });

    it('a key reused with another body: 422 key_mismatch', async () => {
      const key = label('mismatch');
      expect((await post('/orders', key, { a: 1 })).status).toBe(201);
      expectProblem(await post('/orders', key, { a: 2 }), 422, 'key_mismatch');
      await expectNoOpenTransaction();
    });

    it('a key still in progress: 409 key_in_progress', async () => {
      const key = label('progress');
      held.arm();
      const first = post('/orders?hold=1', key).then((res) => res);
      await held.entered;
      const second = await post('/orders', key);
      held.release();
      expectProblem(second, 409, 'key_in_progress');
      expect((await first).status).toBe(201);
      await expectNoOpenTransaction();
    });

    it('the store failed at commit: 503 store_unavailable', async () => {
      const key = label('commit');
      gate.arm();
      const answer = post('/gated', key).then((res) => res);
      await gate.entered;
      await proxy.refuse();
      gate.release();
      const res = await answer;
      await proxy.restore();
      expectProblem(res, 503, 'store_unavailable');
      expect(res.headers['retry-after']).toBe('1');
    });

    it('a lease lost before the commit: 409 lease_lost', async () => {
      const key = label('lease');
      held.arm();
      const stale = post('/slow?hold=1', key).then((res) => res);
      await held.entered;
      const deadline = Date.now() + 10_000;
      let owner = await post('/slow', key);
      while (owner.status === 409 && Date.now() < deadline) {
        await sleep(100);
        owner = await post('/slow', key);
      }
      expect(owner.status).toBe(201);
      held.release();
      expectProblem(await stale, 409, 'lease_lost');
      await expectNoOpenTransaction();
    });

    it('an error answered by IdempotencyErrorFilter: 503 retry_later', async () => {
      const res = await post('/webhook', undefined);
      expectProblem(res, 503, 'retry_later');
      expect(res.headers['retry-after']).toBe('3');
    });
  });

  describe('without renderProblem', () => {
    let database: TestDatabase;
    let app: INestApplication;
    beforeAll(async () => {
      database = await createTestDatabase(`shape_default_${adapter}`);
      app = await createShapeApp(database.url, adapter, {});
    });
    afterAll(async () => {
      await app?.close();
      await database?.drop();
    });

    it('answers problem+json, as before', async () => {
      const key = `default-${adapter}-large`;
      const post = () =>
        request(app.getHttpServer()).post('/sized').set('Idempotency-Key', key).send({});
      const first = await post();
      expect(first.status).toBe(500);
      expect(first.headers['content-type']).toMatch('application/problem+json');
      expect(first.body).toMatchObject({
        type: 'urn:idempotency:response_too_large',
        status: 500,
        code: 'response_too_large',
      });
      const missing = await request(app.getHttpServer()).post('/orders').send({});
      expect(missing.status).toBe(400);
      expect(missing.headers['content-type']).toMatch('application/problem+json');
      expect(missing.body).toMatchObject({ code: 'key_missing', status: 400 });
    });
  });
});

async function createShapeApp(
  databaseUrl: string,
  adapter: AdapterName,
  idempotency: IdempotencyModuleBaseOptions,
): Promise<INestApplication> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: databaseUrl,
        migrations: IDEMPOTENCY_MIGRATIONS,
        migrationsRun: true,
        connectTimeoutMS: 1000,
        logging: false,
      }),
      IdempotencyModule.forRoot({
        tenant: () => '1',
        databaseTimeoutMs: 1500,
        // Every request reaches the store, as after a restart.
        replayCacheSize: 0,
        ...idempotency,
      }),
    ],
    controllers: [ShapeController],
  })
  class ShapeAppModule {}
  return bootstrapTestApp(ShapeAppModule, adapter);
}
