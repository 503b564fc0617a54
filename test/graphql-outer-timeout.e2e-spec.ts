import { jest } from '@jest/globals';
import { type INestApplication, Injectable, type PipeTransform } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { Args, Int, Mutation, Resolver } from '@nestjs/graphql';
import { getDataSourceToken, InjectDataSource } from '@nestjs/typeorm';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import request from 'supertest';
import { type DataSource } from 'typeorm';
import { RequestTimeoutInterceptor } from '../sample-app/request-timeout.interceptor.js';
import { IDEMPOTENCY_CHANNELS, Idempotent } from '../lib/index.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { replayMarker } from './support/graphql-replay.js';
import { type Transfer as TransferShape } from './support/graphql-app.js';

// See graphql.e2e-spec.ts: a stand-in lets Mercurius load under jest.
jest.mock('@fastify/static', () => () => undefined);
const { createTransfersTable, GRAPHQL_DRIVERS, startGraphqlApp, Transfer, TransfersResolver } =
  await import('./support/graphql-app.js');

/** The global timeout: the resolvers below outlast it on their first call. */
const TIMEOUT_MS = 500;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The events of each key, in order: `channel` or `channel:reason`, 409s left out. */
const events = new Map<string, string[]>();
const listeners = Object.values(IDEMPOTENCY_CHANNELS).map((name) => {
  const listener = (message: unknown) => {
    const { key, reason } = message as { key?: string; reason?: string };
    if (key === undefined || name === IDEMPOTENCY_CHANNELS.conflict) return;
    events.set(key, [...(events.get(key) ?? []), reason ? `${name}:${reason}` : name]);
  };
  return [name, listener] as const;
});
beforeAll(() => listeners.forEach(([name, listener]) => subscribe(name, listener)));
afterAll(() => listeners.forEach(([name, listener]) => unsubscribe(name, listener)));

/** Resolver starts, by amount (each test its own amount). */
const starts = new Map<number, number>();
/** Resolver ends, by amount, so that a test knows the late work is over. */
const ends = new Map<number, number>();
const count = (map: Map<number, number>, amount: number) =>
  map.set(amount, (map.get(amount) ?? 0) + 1);

/** Slower than the timeout the first time it sees an amount: the resolver has not started. */
@Injectable()
class SlowFirstPipe implements PipeTransform<number, Promise<number>> {
  private readonly seen = new Set<number>();

  async transform(amount: number) {
    if (!this.seen.has(amount)) {
      this.seen.add(amount);
      await sleep(TIMEOUT_MS * 2);
    }
    return amount;
  }
}

@Resolver(() => Transfer)
class LateResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** Writes, then outlasts the timeout on its first call; `fail` throws after the write. */
  @Mutation(() => Transfer)
  @Idempotent()
  async lateTransfer(
    @Args('amount', { type: () => Int }) amount: number,
    @Args('fail', { nullable: true }) fail?: boolean,
  ): Promise<TransferShape> {
    count(starts, amount);
    try {
      const rows = (await this.dataSource.query(
        "INSERT INTO transfers (amount, note) VALUES ($1, 'late') RETURNING id",
        [amount],
      )) as { id: number }[];
      if (starts.get(amount) === 1) await sleep(TIMEOUT_MS * 3);
      if (fail) throw new Error('The ledger is closed');
      return { id: rows[0].id, amount, note: 'late' };
    } finally {
      count(ends, amount);
    }
  }

  @Mutation(() => Transfer)
  @Idempotent()
  async pipedTransfer(
    @Args('amount', { type: () => Int }, SlowFirstPipe) amount: number,
  ): Promise<TransferShape> {
    count(starts, amount);
    const rows = (await this.dataSource.query(
      "INSERT INTO transfers (amount, note) VALUES ($1, 'piped') RETURNING id",
      [amount],
    )) as { id: number }[];
    count(ends, amount);
    return { id: rows[0].id, amount, note: 'piped' };
  }
}

interface GraphqlAnswer {
  data?: Record<string, unknown> | null;
  errors?: { message: string; extensions?: Record<string, unknown> }[];
}

describe.each(GRAPHQL_DRIVERS)(
  'a mutation under a global timeout() interceptor, on %s',
  (driver) => {
    /** The resolvers count by amount: each driver has its own. */
    const base = driver === 'apollo' ? 200 : 300;
    let database: TestDatabase;
    let app: INestApplication;

    const start = () =>
      startGraphqlApp(
        database.url,
        driver,
        [TransfersResolver, LateResolver],
        [
          SlowFirstPipe,
          { provide: APP_INTERCEPTOR, useValue: new RequestTimeoutInterceptor(TIMEOUT_MS) },
        ],
      );

    beforeAll(async () => {
      database = await createTestDatabase(`graphql_timeout_${driver}`);
      app = await start();
      await createTransfersTable(app);
    });
    afterAll(async () => {
      await app?.close();
      await database?.drop();
    });

    const answer = async (query: string, key: string, to: INestApplication = app) => {
      const res = await request(to.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', key)
        .send({ query });
      expect(res.status).toBe(200);
      return { text: res.text, body: res.body as GraphqlAnswer };
    };
    const rows = async (amount: number) =>
      Number(
        (
          (await app
            .get<DataSource>(getDataSourceToken())
            .query('SELECT count(*) AS n FROM transfers WHERE amount = $1', [amount])) as {
            n: string;
          }[]
        )[0].n,
      );
    const stateOf = async (key: string) =>
      (await app
        .get<DataSource>(getDataSourceToken())
        .query('SELECT state FROM idempotency_keys WHERE key = $1', [key])) as { state: string }[];
    /** Waits until the late resolver of `amount` has ended (at most 5 s). */
    const untilEnded = async (amount: number) => {
      for (let waited = 0; !ends.get(amount); waited += 20) {
        if (waited > 5000) throw new Error(`the resolver of ${amount} did not end`);
        await sleep(20);
      }
    };
    /**
     * Retries `query` until it is answered (at most `withinMs`), as a client does: on
     * key_in_progress, and on a timeout of its own (the machine may be slow).
     */
    const retryUntilAnswered = async (query: string, key: string, withinMs = 5000) => {
      const began = Date.now();
      for (;;) {
        const res = await answer(query, key);
        const error = res.body.errors?.[0];
        const again =
          error?.extensions?.code === 'key_in_progress' || error?.message === 'Request Timeout';
        if (!again || Date.now() - began > withinMs) {
          return { ...res, elapsedMs: Date.now() - began };
        }
        await sleep(100);
      }
    };

    it('the resolver finishes after the timeout: its answer is committed with its write, and the retries replay it', async () => {
      const amount = base + 1;
      const query = `mutation { lateTransfer(amount: ${amount}) { id amount note } }`;
      const first = await answer(query, `${driver}-late-value`);
      expect(first.body.data).toBeNull();
      expect(first.body.errors).toEqual([
        expect.objectContaining({ message: 'Request Timeout', path: ['lateTransfer'] }),
      ]);
      await untilEnded(amount);
      const retry = await retryUntilAnswered(query, `${driver}-late-value`);
      expect(retry.body.errors).toBeUndefined();
      expect(retry.body.data!.lateTransfer).toEqual({
        id: expect.any(Number),
        amount,
        note: 'late',
      });
      expect(retry.elapsedMs).toBeLessThan(5000);
      // The retry is the stored answer's replay, as is the next.
      expect(retry.text).toContain(replayMarker(['lateTransfer']));
      expect((await answer(query, `${driver}-late-value`)).text).toBe(retry.text);
      expect(starts.get(amount)).toBe(1);
      expect(await rows(amount)).toBe(1);
      expect(await stateOf(`${driver}-late-value:lateTransfer`)).toEqual([{ state: 'done' }]);
      expect(events.get(`${driver}-late-value:lateTransfer`)).toEqual([
        'idempotency:claimed',
        'idempotency:stored',
        'idempotency:replayed',
        'idempotency:replayed',
      ]);
    });

    it('the resolver fails after the timeout: its write rolls back, its error is its answer', async () => {
      const amount = base + 2;
      const query = `mutation { lateTransfer(amount: ${amount}, fail: true) { id } }`;
      const first = await answer(query, `${driver}-late-error`);
      expect(first.body.errors![0].message).toBe('Request Timeout');
      await untilEnded(amount);
      const retry = await retryUntilAnswered(query, `${driver}-late-error`);
      expect(retry.body.errors).toEqual([
        expect.objectContaining({ message: 'The ledger is closed', path: ['lateTransfer'] }),
      ]);
      expect((await answer(query, `${driver}-late-error`)).text).toBe(retry.text);
      expect(starts.get(amount)).toBe(1);
      expect(await rows(amount)).toBe(0);
    });

    it('the timeout fires in a pipe: the key is given back at once, the resolver never starts late, the retry runs', async () => {
      const amount = base + 3;
      const query = `mutation { pipedTransfer(amount: ${amount}) { id note } }`;
      const first = await answer(query, `${driver}-late-pipe`);
      expect(first.body.errors![0].message).toBe('Request Timeout');
      const retry = await retryUntilAnswered(query, `${driver}-late-pipe`);
      expect(retry.body).toEqual({ data: { pipedTransfer: expect.anything() } });
      expect(retry.body.data!.pipedTransfer).toEqual({ id: expect.any(Number), note: 'piped' });
      // The pipe of the first call resolves later: its resolver must not run then.
      await sleep(TIMEOUT_MS * 2);
      expect(starts.get(amount)).toBe(1);
      expect(await rows(amount)).toBe(1);
      expect(events.get(`${driver}-late-pipe:pipedTransfer`)?.slice(0, 4)).toEqual([
        'idempotency:claimed',
        'idempotency:released:before_handler',
        'idempotency:claimed',
        'idempotency:stored',
      ]);
    });

    it('app.close() returns once a timed-out resolver is done', async () => {
      const other = await start();
      const amount = base + 4;
      const first = await answer(
        `mutation { lateTransfer(amount: ${amount}) { id } }`,
        `${driver}-late-close`,
        other,
      );
      expect(first.body.errors![0].message).toBe('Request Timeout');
      await untilEnded(amount);
      const closed = await Promise.race([
        other.close().then(() => 'closed'),
        sleep(10_000).then(() => 'still open after 10 s'),
      ]);
      expect(closed).toBe('closed');
      expect(await rows(amount)).toBe(1);
      expect(await stateOf(`${driver}-late-close:lateTransfer`)).toEqual([{ state: 'done' }]);
    });
  },
);
