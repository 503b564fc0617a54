import {
  Controller,
  createParamDecorator,
  type ExecutionContext,
  Headers,
  type INestApplication,
  Injectable,
  Module,
  type PipeTransform,
  Post,
  StreamableFile,
} from '@nestjs/common';
import { Readable } from 'node:stream';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { type AddressInfo } from 'node:net';
import { Client } from 'pg';
import { type DataSource } from 'typeorm';
import { RequestTimeoutInterceptor } from '../sample-app/request-timeout.interceptor.js';
import {
  IDEMPOTENCY_CHANNELS,
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  Idempotent,
} from '../lib/index.js';
import { ADAPTERS, type AdapterName, bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { SIDE_EFFECTS_DDL } from './support/test-app.js';

/** The outer timeout: short, so that it fires while the claim waits on a lock. */
const TIMEOUT_MS = 300;

/** A trigger that makes the first update of a listed key sleep past the outer timeout. */
const SLOW_TAKEOVER_DDL = `
  CREATE TABLE IF NOT EXISTS slow_takeovers (key text PRIMARY KEY);
  CREATE OR REPLACE FUNCTION slow_takeover() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      DELETE FROM slow_takeovers WHERE key = NEW.key;
      IF FOUND THEN PERFORM pg_sleep(1); END IF;
      RETURN NEW;
    END $$;
  DROP TRIGGER IF EXISTS slow_takeover ON idempotency_keys;
  CREATE TRIGGER slow_takeover BEFORE UPDATE ON idempotency_keys
    FOR EACH ROW EXECUTE FUNCTION slow_takeover();`;

/** The events of each key, in order: `channel` or `channel:reason`. */
const events = new Map<string, string[]>();
const listeners = Object.values(IDEMPOTENCY_CHANNELS).map((name) => {
  const listener = (message: unknown) => {
    const { key, reason } = message as { key?: string; reason?: string };
    if (key === undefined) return;
    events.set(key, [...(events.get(key) ?? []), reason ? `${name}:${reason}` : name]);
  };
  return [name, listener] as const;
});
beforeAll(() => listeners.forEach(([name, listener]) => subscribe(name, listener)));
afterAll(() => listeners.forEach(([name, listener]) => unsubscribe(name, listener)));

/** The 409s of the retries that came before the give-back are not what is checked. */
const withoutConflicts = (seen: string[] = []) =>
  seen.filter((event) => event !== 'idempotency:conflict');

/** Handler starts, by key: the database counts committed work, this counts every start. */
const starts = new Map<string, number>();

/** Slower than the outer timeout the first time it sees a key: the handler has not started. */
@Injectable()
class SlowFirstPipe implements PipeTransform<string, Promise<string>> {
  private readonly seen = new Set<string>();

  async transform(key: string) {
    if (!this.seen.has(key)) {
      this.seen.add(key);
      await new Promise((resolve) => setTimeout(resolve, TIMEOUT_MS * 2));
    }
    return key;
  }
}

/** The request's key, as a parameter that takes pipes (`@Headers()` takes none). */
const KeyParam = createParamDecorator(
  (_data: unknown, context: ExecutionContext) =>
    context.switchToHttp().getRequest<{ headers: Record<string, string> }>().headers[
      'idempotency-key'
    ],
);

@Controller()
class WorkController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('work')
  @Idempotent()
  async work(@Headers('idempotency-key') key: string) {
    starts.set(key, (starts.get(key) ?? 0) + 1);
    const rows = (await this.dataSource.query(
      "INSERT INTO side_effects (route) VALUES ('work') RETURNING id",
    )) as { id: number }[];
    return { id: rows[0].id };
  }

  @Post('slow-pipe')
  @Idempotent()
  async slowPipe(@KeyParam(SlowFirstPipe) key: string) {
    starts.set(key, (starts.get(key) ?? 0) + 1);
    return { ran: key };
  }

  /** Slower than the outer timeout on a key's first attempt, then answers a file. */
  @Post('slow-file')
  @Idempotent()
  async slowFile(@Headers('idempotency-key') key: string) {
    const attempt = (starts.get(key) ?? 0) + 1;
    starts.set(key, attempt);
    if (attempt === 1) await new Promise((resolve) => setTimeout(resolve, TIMEOUT_MS * 2));
    await this.dataSource.query("INSERT INTO side_effects (route) VALUES ('slow-file')");
    return new StreamableFile(Readable.from([Buffer.from(CSV)]), { type: 'text/csv' });
  }
}

const CSV = 'id,name\n1,alpha\n2,beta\n';

function appModule(url: string) {
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
    controllers: [WorkController],
    // A global interceptor runs outside every route's own, @Idempotent()'s among them.
    providers: [{ provide: APP_INTERCEPTOR, useValue: new RequestTimeoutInterceptor(TIMEOUT_MS) }],
  })
  class OuterTimeoutAppModule {}
  return OuterTimeoutAppModule;
}

describe.each(ADAPTERS)(
  'a claim that lands after an outer timeout, on %s',
  (adapter: AdapterName) => {
    let database: TestDatabase;
    let db: Client;
    let blocker: Client;
    let app: INestApplication;
    let base: string;
    let n = 0;
    const newKey = () => `late-${adapter}-${++n}-${Date.now()}`;

    beforeAll(async () => {
      database = await createTestDatabase(`outer_timeout_${adapter}`);
      db = new Client({ connectionString: database.url });
      await db.connect();
      await db.query(SIDE_EFFECTS_DDL);
      blocker = new Client({ connectionString: database.url });
      await blocker.connect();
      app = await bootstrapTestApp(appModule(database.url), adapter);
      await app.listen(0, '127.0.0.1');
      base = `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}`;
    });
    afterAll(async () => {
      await app?.close();
      await blocker?.end();
      await db?.end();
      await database?.drop();
    });

    const post = async (key: string, path = '/work') => {
      const res = await fetch(`${base}${path}`, {
        method: 'POST',
        headers: { 'idempotency-key': key, 'content-type': 'application/json' },
        body: JSON.stringify({ amount: 1 }),
      });
      return {
        status: res.status,
        retryAfter: res.headers.get('retry-after'),
        contentType: res.headers.get('content-type'),
        replayed: res.headers.get('idempotent-replayed'),
        text: await res.text(),
      };
    };
    const sideEffects = async (route = 'work') =>
      Number(
        (
          await db.query<{ n: string }>('SELECT count(*) AS n FROM side_effects WHERE route = $1', [
            route,
          ])
        ).rows[0].n,
      );

    /** Waits until a statement of the app waits on a lock held by `blocker`. */
    async function untilBlocked() {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const { rows } = await db.query(
          `SELECT 1 FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> $1`,
          [(blocker as unknown as { processID: number }).processID],
        );
        if (rows.length > 0) return;
        if (Date.now() > deadline) throw new Error('no statement of the app waits on the lock');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }

    /** Waits until a statement of the app sleeps in the slow takeover's trigger. */
    async function untilSleeping() {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const { rows } = await db.query(
          `SELECT 1 FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event = 'PgSleep'`,
        );
        if (rows.length > 0) return;
        if (Date.now() > deadline) throw new Error('no statement of the app sleeps');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }

    /**
     * Retries the key until it is answered (at most `withinMs`); the 409s on the way are the
     * moment between the late claim's commit and its release.
     */
    async function retryUntilAnswered(key: string, withinMs: number, path = '/work') {
      const began = Date.now();
      const conflicts: (string | null)[] = [];
      for (;;) {
        const res = await post(key, path);
        if (res.status !== 409 || Date.now() - began > withinMs) {
          return { ...res, conflicts, elapsedMs: Date.now() - began };
        }
        conflicts.push(res.retryAfter);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }

    it('a new key: the late claim is given back at once, the handler never starts, and the retry runs promptly', async () => {
      const key = newKey();
      const before = await sideEffects();
      // Another transaction's uncommitted row for the key: the claim's insert waits on its
      // unique index entry.
      await blocker.query('BEGIN');
      await blocker.query(
        `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until)
       VALUES ('1', $1, '\\x00', clock_timestamp())`,
        [key],
      );
      const pending = post(key);
      await untilBlocked();
      const first = await pending;
      expect(first.status).toBe(408);
      // The claim is still in flight; it succeeds once the other transaction rolls back.
      await blocker.query('ROLLBACK');

      const retry = await retryUntilAnswered(key, 3000);
      // Shown whole when it fails: a 409 past the deadline tells its Retry-After.
      expect({ status: retry.status, retryAfter: retry.retryAfter }).toEqual({
        status: 201,
        retryAfter: null,
      });
      expect(JSON.parse(retry.text)).toEqual({ id: expect.any(Number) });
      expect(retry.elapsedMs).toBeLessThan(3000);
      // The first request's handler never started: the retry's is the one run.
      expect(starts.get(key)).toBe(1);
      expect(await sideEffects()).toBe(before + 1);
      const { rows } = await db.query('SELECT state FROM idempotency_keys WHERE key = $1', [key]);
      expect(rows).toEqual([{ state: 'done' }]);
      expect(withoutConflicts(events.get(key))).toEqual([
        'idempotency:claimed',
        'idempotency:released:before_handler',
        'idempotency:claimed',
        'idempotency:stored',
      ]);
    });

    it('an expired lease: the late takeover is given back at once, the handler never starts, and the retry runs promptly', async () => {
      // A key whose worker crashed: started, its lease over, with the fingerprint this request
      // has (a finished key of the same request lends it: the key is not part of it).
      const seed = newKey();
      const key = newKey();
      // Set-up only: on a loaded machine the seed itself may meet the outer timeout (408) and
      // then be in progress (409); its retries with the same key end in its 201.
      let seeded = await post(seed);
      for (let tries = 0; seeded.status !== 201 && tries < 20; tries += 1) {
        await new Promise((resolve) => setTimeout(resolve, TIMEOUT_MS));
        seeded = await post(seed);
      }
      expect(seeded.status).toBe(201);
      await db.query(
        `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until)
       SELECT tenant_id, $2, fingerprint, clock_timestamp() - interval '1 second'
       FROM idempotency_keys WHERE key = $1`,
        [seed, key],
      );
      const before = await sideEffects();
      // The takeover's update is slowed on the server (a trigger sleeps, once, for this key):
      // it lands after the outer timeout answered. (A lock on the row no longer delays it: a
      // takeover skips a locked row, held by a live owner, and answers 409 at once.)
      await db.query(SLOW_TAKEOVER_DDL);
      await db.query('INSERT INTO slow_takeovers (key) VALUES ($1)', [key]);
      const pending = post(key);
      await untilSleeping();
      const first = await pending;
      expect(first.status).toBe(408);

      const retry = await retryUntilAnswered(key, 3000);
      // Shown whole when it fails: a 409 past the deadline tells its Retry-After.
      expect({ status: retry.status, retryAfter: retry.retryAfter }).toEqual({
        status: 201,
        retryAfter: null,
      });
      expect(retry.elapsedMs).toBeLessThan(3000);
      expect(starts.get(key)).toBe(1);
      expect(await sideEffects()).toBe(before + 1);
      const { rows } = await db.query(
        'SELECT state, lock_version FROM idempotency_keys WHERE key = $1',
        [key],
      );
      // Taken over twice: by the request that was gone (given back), then by its retry, which
      // resumes a key given back rather than a lease that ran out.
      expect(rows).toEqual([{ state: 'done', lock_version: '2' }]);
      expect(withoutConflicts(events.get(key))).toEqual([
        'idempotency:taken-over',
        'idempotency:released:before_handler',
        'idempotency:resumed',
        'idempotency:stored',
      ]);
    });

    it('a timeout in a pipe: the key is given back at once, and said so (released before_handler)', async () => {
      const key = newKey();
      const first = await post(key, '/slow-pipe');
      expect(first.status).toBe(408);
      const retry = await retryUntilAnswered(key, 3000, '/slow-pipe');
      expect({ status: retry.status, text: retry.text }).toEqual({
        status: 201,
        text: JSON.stringify({ ran: key }),
      });
      expect(starts.get(key)).toBe(1);
      expect(withoutConflicts(events.get(key))).toEqual([
        'idempotency:claimed',
        'idempotency:released:before_handler',
        'idempotency:claimed',
        'idempotency:stored',
      ]);
    });

    it('a file the handler answers after the outer timeout: not stored unsent; the retry runs and gets the file', async () => {
      const key = newKey();
      const first = await post(key, '/slow-file');
      expect(first.status).toBe(408);
      // The first handler settles after the 408 with a stream nobody sends: its answer is not
      // known, so its work is rolled back and the key given back.
      const retry = await retryUntilAnswered(key, 5000, '/slow-file');
      expect({ status: retry.status, text: retry.text }).toEqual({ status: 201, text: CSV });
      expect(retry.contentType).toBe('text/csv');
      expect(retry.replayed).toBeNull();
      expect(starts.get(key)).toBe(2);
      expect(await sideEffects('slow-file')).toBe(1);
      const replay = await post(key, '/slow-file');
      expect(replay.replayed).toBe('true');
      expect(replay.text).toBe(CSV);
    });
  },
);
