import { DatabaseError, type Pool } from 'pg';
import { noteCancelAsked, type CancelAsked } from '../connection/cancel-asked.js';
import { isCancelAskedForError } from '../connection/connection-errors.js';
import { type JoinableTransaction, transactionScope } from '../transaction/transaction-scope.js';
import { watchCancels } from './cancel-watch.js';

const userCancel = () =>
  Object.assign(new DatabaseError('canceling statement due to user request', 0, 'error'), {
    severity: 'ERROR',
    code: '57014',
  });

/** A client class standing for node-postgres': each query fails with `failWith`. */
class FakeClient {
  failWith?: Error;
  query(...args: unknown[]): unknown {
    const error = this.failWith;
    const submittable = args[0] as { submit?: unknown; handleError?: (e: unknown) => void };
    if (typeof submittable?.submit === 'function') {
      if (error) submittable.handleError?.(error);
      return submittable;
    }
    const callback = args.find((arg) => typeof arg === 'function') as
      ((e: unknown, r?: unknown) => void) | undefined;
    if (callback) {
      callback(error, error ? undefined : { rows: [] });
      return undefined;
    }
    return error ? Promise.reject(error) : Promise.resolve({ rows: [] });
  }
}

const poolOf = () => ({ Client: FakeClient }) as unknown as Pool & { Client: typeof FakeClient };

describe('watchCancels: a cancel asked by the request, and what its connection meets', () => {
  it("subclasses the pool's client class once, for every pool of that class", () => {
    const first = poolOf();
    const second = poolOf();
    watchCancels(first);
    const watched = first.Client;
    watchCancels(first);
    watchCancels(second);
    expect([watched === FakeClient, first.Client, second.Client]).toEqual([
      false,
      watched,
      watched,
    ]);
    expect(new first.Client()).toBeInstanceOf(FakeClient);
  });

  it("tells the scope's transaction of a cancel or end its code sends, and nothing outside", async () => {
    const pool = poolOf();
    watchCancels(pool);
    const asked: CancelAsked[] = [];
    const store: JoinableTransaction = { cancelAsked: (one) => asked.push(one) };
    const control = new pool.Client();
    await control.query('select pg_cancel_backend(41)', []);
    await transactionScope.run(store, async () => {
      await control.query('select pg_cancel_backend(42)', []);
      await control.query({ text: 'SELECT pg_terminate_backend($1)', values: [43] });
      await control.query('SELECT 1', []);
    });
    expect(asked).toEqual([
      { kind: 'cancel', pid: 42 },
      { kind: 'terminate', pid: 43 },
    ]);
  });

  it.each<[string, (client: FakeClient) => Promise<unknown>]>([
    ['a promise', (client) => client.query('SELECT pg_sleep(3)') as Promise<unknown>],
    [
      'a callback',
      (client) =>
        new Promise((resolve, reject) => {
          client.query('SELECT pg_sleep(3)', [], (error: unknown) =>
            error ? reject(error) : resolve(undefined),
          );
        }),
    ],
    [
      'a submittable',
      (client) =>
        new Promise((resolve, reject) => {
          client.query({ submit: () => undefined, handleError: reject });
          resolve(undefined);
        }),
    ],
  ])('marks the cancel its connection meets, as %s', async (_name, run) => {
    const pool = poolOf();
    watchCancels(pool);
    const client = new pool.Client();
    client.failWith = userCancel();
    noteCancelAsked(client, 'cancel');
    const error: unknown = await run(client).catch((failure: unknown) => failure);
    expect(error).toBe(client.failWith);
    expect(isCancelAskedForError(error)).toBe(true);
  });

  it("leaves a cancel nobody in the request asked for unmarked (an operator's)", async () => {
    const pool = poolOf();
    watchCancels(pool);
    const client = new pool.Client();
    client.failWith = userCancel();
    const error: unknown = await (client.query('SELECT 1') as Promise<unknown>).catch(
      (failure: unknown) => failure,
    );
    expect(isCancelAskedForError(error)).toBe(false);
  });
});
