import { Client } from 'pg';
import request from 'supertest';
import { startFakePsp, type FakePsp } from '../../sample-app/psp/fake-psp.js';
import { expectProblem, type Res } from '../support/sample-app-http.js';
import { startSampleApp, type WorkerProcess } from '../support/sample-app-process.js';
import { startSyncStandbyPair, type SyncStandbyPair } from '../support/sync-standby.js';

/**
 * The sample app on a primary whose synchronous standby stops (as when the standbys of a
 * pg_auto_failover cluster are down, `number_sync_standbys = 1`): each `COMMIT` then waits in
 * `SyncRep`, committed on the primary alone, and no answer may rest on it. The request is
 * answered 503 after the library's database deadline, never 500 and never 201, and its
 * retries too; once the standby is back, the commit that waited goes through, and a retry
 * replays its answer. A commit cancelled while it waits would be made visible on the primary
 * without a standby holding it (PostgreSQL's "canceling wait for synchronous replication"), and
 * a retry would replay that 201: lost for good if the primary failed then.
 */

const TENANT = '7';
/** `TRANSFER_DELAY_MS`: the handler's write is in, its wait not over, when the standby stops. */
const DELAY_MS = 2500;
const STORE_UNAVAILABLE = {
  type: 'urn:idempotency:store_unavailable',
  title: 'Idempotency store unavailable',
  status: 503,
  code: 'store_unavailable',
};
/** The 503 of a request whose handler ran. */
const AFTER_EXECUTION =
  'The idempotency store became unavailable before the response could be stored. ' +
  'Retry later with the same key: completed atomic phases are not run again.';

function postTransfer(url: string, key: string, from: string): Promise<Res> {
  return request(url)
    .post('/transfers')
    .set('X-Tenant-Id', TENANT)
    .set('Idempotency-Key', key)
    .send({ amount: 100, from, to: 'acc_sink' })
    .then((res) => res);
}

describe('a COMMIT waiting for a synchronous standby that is gone', () => {
  let pair: SyncStandbyPair;
  let psp: FakePsp;
  let app: WorkerProcess;
  let db: Client;

  beforeAll(async () => {
    pair = await startSyncStandbyPair();
    psp = await startFakePsp();
    app = await startSampleApp({
      adapter: 'express',
      databaseUrl: pair.url,
      pspUrl: psp.url,
      transferDelayMs: DELAY_MS,
    });
    db = new Client({ connectionString: pair.url });
    await db.connect();
  }, 90_000);

  afterAll(async () => {
    await db?.end();
    await app?.kill('SIGTERM');
    await psp?.close();
    await pair?.stop();
  });

  /** The key's state and the transfers from `from`, as the primary's other sessions see them. */
  async function seen(key: string, from: string) {
    const keys = await db.query<{ state: string; response_code: number | null }>(
      'SELECT state, response_code FROM idempotency_keys WHERE tenant_id = $1 AND key = $2',
      [TENANT, key],
    );
    const transfers = await db.query<{ id: string }>(
      'SELECT id FROM transfers WHERE tenant_id = $1 AND from_customer = $2',
      [TENANT, from],
    );
    return { keys: keys.rows, transfers: transfers.rows.map((r) => r.id) };
  }

  it('answers 503, replays no answer the standby does not hold, and resumes once it is back', async () => {
    const key = 'syncrep-1';
    const from = 'acc_syncrep_1';
    const first = postTransfer(app.url, key, from);
    // The claim is committed (and confirmed) before the standby stops: only the handler's
    // commit, with its stored answer, meets the standby gone.
    for (let i = 0; (await seen(key, from)).keys.length === 0; i++) {
      if (i > 100) throw new Error('the claim never came');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await pair.stopStandby();

    const answer = await first;
    expectProblem(answer, 503, 'store_unavailable');
    expect(answer.body).toMatchObject({ ...STORE_UNAVAILABLE, detail: AFTER_EXECUTION });
    expect(answer.headers['retry-after']).toBe('1');

    // A retry meets the key held by the commit that waits: 409, not the answer. (The claim
    // reads the key without waiting on the row the commit holds: a held key is in progress.)
    const retry = await postTransfer(app.url, key, from);
    expectProblem(retry, 409, 'key_in_progress');
    expect(retry.headers['retry-after']).toBeDefined();
    // Nothing of the request is visible on the primary: its commit still waits.
    expect(await seen(key, from)).toEqual({
      keys: [{ state: 'started', response_code: null }],
      transfers: [],
    });

    await pair.startStandby();
    expect(await pair.commitsConfirmed(30_000)).toBe(true);
    const replay = await postTransfer(app.url, key, from);
    expect(replay.status).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    const after = await seen(key, from);
    expect(after.keys).toEqual([{ state: 'done', response_code: 201 }]);
    expect(after.transfers).toEqual([(replay.body as { id: string }).id]);
  }, 60_000);
});
