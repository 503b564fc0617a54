import { Client } from 'pg';
import Stripe from 'stripe';
import { ADAPTERS } from '../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { startWorker, type WorkerProcess } from '../support/worker-process.js';
import { STRIPE_DDL } from '../stripe/stripe-app.js';

/**
 * The official `stripe` client (v23) driving a Stripe-shaped app on the library: it sends a key
 * with every POST and retries connection errors, 409s and 5xx on its own, with backoff and
 * without reading `Retry-After`. What an ordinary client does
 * must be enough to get its result after a crash, and the library's refusals must reach it as
 * errors (it throws only on `{ "error": … }` bodies). Its waits are 0.5 s doubling to 5 s,
 * each jittered down to half (never under 0.5 s). A crashed worker's key is free once its
 * lease (5 s by default) has run out after its last renewal; with `maxNetworkRetries: 5` the
 * client's last retry often came before that (two CI runs in three failed here), and it got its
 * charge 8 to 13 s after the call: the crash cell retries 8 times, whose waits add up to more.
 */
describe.each(ADAPTERS)('the stripe client against an app on the library (%s)', (adapter) => {
  let database: TestDatabase;
  let admin: Client;
  const workers: WorkerProcess[] = [];

  const start = async (env: Record<string, string>) => {
    const worker = await startWorker('test/stripe/stripe-worker.js', {
      DATABASE_URL: database.url,
      ADAPTER: adapter,
      ...env,
    });
    workers.push(worker);
    return worker;
  };
  const client = (port: number, maxNetworkRetries: number, key = 'sk_test_one') =>
    new Stripe(key, { host: '127.0.0.1', port, protocol: 'http', maxNetworkRetries });
  /** A transaction of the app's is open and waiting: the handler wrote and now holds. */
  const midCharge = async () =>
    (
      await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND state = 'idle in transaction'`,
      )
    ).rows[0].n > 0;
  const charges = async () =>
    (await admin.query<{ n: number }>('SELECT count(*)::int AS n FROM stripe_charges')).rows[0].n;

  beforeAll(async () => {
    database = await createTestDatabase(`stripe_${adapter}`);
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(STRIPE_DDL);
  });

  afterEach(async () => {
    await Promise.all(workers.splice(0).map((worker) => worker.kill()));
    await admin.query('TRUNCATE stripe_charges');
  });

  afterAll(async () => {
    await admin.end();
    await database.drop();
  });

  /**
   * Two instances behind a balancer (a TCP proxy); the one serving dies in the middle of a
   * charge, and the balancer sends what comes next to the other. The client's call goes on
   * retrying under its key: it returns the charge if the other instance takes the dead one's
   * key over within the client's retries.
   */
  async function crashMidCharge(lease: Record<string, string>, retries: number) {
    const first = await start({ HOLD_MS: '3000', ...lease });
    const second = await start(lease);
    const balancer = new TcpProxy('127.0.0.1', first.port);
    await balancer.start();
    try {
      const call = client(balancer.port, retries).charges.create({
        amount: 500,
        currency: 'eur',
      });
      const outcome = call.then(
        (charge) => ({ charge }),
        (error: unknown) => ({ error: error as InstanceType<typeof Stripe.errors.StripeError> }),
      );
      // The charge row is written (uncommitted), then the instance holds: kill it there.
      for (let i = 0; i < 200 && !(await midCharge()); i++) await sleep(20);
      balancer.forwardTo(second.port);
      await first.kill();
      return await outcome;
    } finally {
      await balancer.stop();
    }
  }

  it('a crash mid-charge: the default lease is taken over within the client’s retries', async () => {
    const began = Date.now();
    const outcome = await crashMidCharge({}, 8);
    expect(outcome).toEqual({
      charge: expect.objectContaining({ object: 'charge', amount: 500, currency: 'eur' }),
    });
    // Rolled back with the dead worker, written once by the one that took the key over.
    expect(await charges()).toBe(1);
    console.log(`[stripe ${adapter}] charge returned ${Date.now() - began} ms after the call`);
  }, 60_000);

  // The control shows the case can fail; which adapter serves does not change what the lease
  // does, so it runs once (its client's retries end well inside 60 s).
  if (adapter === 'express') {
    it('the control: with a 60 s lease the client gives up on 409s and the charge is lost', async () => {
      const outcome = await crashMidCharge({ LEASE_MS: '60000' }, 8);
      expect(outcome).toMatchObject({
        error: { statusCode: 409, code: 'key_in_progress' },
      });
      expect(await charges()).toBe(0);
    }, 60_000);
  }

  it('the library’s refusals reach the client as Stripe errors', async () => {
    const worker = await start({ HOLD_MS: '1500' });
    const stripe = client(worker.port, 0);
    const first = stripe.charges.create(
      { amount: 700, currency: 'usd' },
      { idempotencyKey: 'order-17' },
    );
    await sleep(400);
    // The same key while the first call runs: 409, as an error the client throws.
    await expect(
      stripe.charges.create({ amount: 700, currency: 'usd' }, { idempotencyKey: 'order-17' }),
    ).rejects.toMatchObject({ statusCode: 409, code: 'key_in_progress' });
    const charge = await first;
    // Its retry gets the same charge; another body under the key is a 422.
    await expect(
      stripe.charges.create({ amount: 700, currency: 'usd' }, { idempotencyKey: 'order-17' }),
    ).resolves.toMatchObject({ id: charge.id });
    await expect(
      stripe.charges.create({ amount: 900, currency: 'usd' }, { idempotencyKey: 'order-17' }),
    ).rejects.toMatchObject({ statusCode: 422, code: 'key_mismatch' });
    // Keys are scoped per API key: another account's same key is a new charge.
    await expect(
      client(worker.port, 0, 'sk_test_other').charges.create(
        { amount: 900, currency: 'usd' },
        { idempotencyKey: 'order-17' },
      ),
    ).resolves.toMatchObject({ amount: 900 });
    expect(await charges()).toBe(2);
  }, 60_000);
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
