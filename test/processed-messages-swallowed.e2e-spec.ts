import { type DataSource, type EntityManager } from 'typeorm';
import { ProcessedMessages } from '../lib/index.js';
import { type ResolvedIdempotencyOptions } from '../lib/shapes/idempotency-options.interface.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';

/**
 * Found by the consumer fuzzer (`FUZZ_TRANSPORT=rabbitmq FUZZ_VIA=once`, a program
 * `write fail:swallow` on TypeORM and pg): an effect that catches a failed statement of its
 * own and goes on leaves the delivery's transaction aborted, and PostgreSQL answers its COMMIT
 * with a ROLLBACK, not an error. Nothing committed, neither the effect's write nor the record of
 * the id; `processOnce()` must not report the delivery done, or the consumer acknowledges a
 * message whose effect is lost (a webhook sender told 200 never sends it again). A route
 * answers the same case 500 `transaction_aborted`, nothing stored, and its retry runs again.
 */
describe('ProcessedMessages.processOnce with an effect that swallowed a failed statement', () => {
  let database: MigratedDatabase;
  let dataSource: DataSource;
  let messages: ProcessedMessages;

  beforeAll(async () => {
    database = await createMigratedDatabase('processed_swallowed');
    dataSource = database.dataSource;
    await dataSource.query('CREATE TABLE refunds (id text PRIMARY KEY)');
    messages = new ProcessedMessages(
      new IdempotencyDatabase(() => dataSource, 5000),
      {} as ResolvedIdempotencyOptions,
    );
  });
  afterAll(async () => {
    await database?.drop();
  });

  const count = async (sql: string, id: string) =>
    ((await dataSource.query(sql, [id])) as unknown[]).length;

  it('throws transaction_aborted, nothing committed; the redelivery applies it once', async () => {
    const swallowing = async (manager: EntityManager) => {
      await manager.query('INSERT INTO refunds (id) VALUES ($1)', ['m-swallowed']);
      // A duplicate insert the effect expects now and then, caught: the transaction is aborted.
      await manager
        .query('INSERT INTO refunds (id) VALUES ($1)', ['m-swallowed'])
        .catch(() => undefined);
    };
    const outcome = await messages.processOnce('refunds', 'm-swallowed', swallowing).then(
      (done) => ({ done }),
      (error: unknown) => ({ error }),
    );

    // Nothing committed: the write rolled back, and so did the record of the id.
    expect(await count('SELECT 1 FROM refunds WHERE id = $1', 'm-swallowed')).toBe(0);
    expect(
      await count('SELECT 1 FROM processed_messages WHERE message_id = $1', 'm-swallowed'),
    ).toBe(0);
    // So the delivery is not done: before the fix, `{ done: { duplicate: false } }`.
    expect(outcome).toMatchObject({
      error: { name: 'IdempotencyTransactionAbortedError', code: 'transaction_aborted' },
    });

    // The message comes again (the consumer did not acknowledge it): applied once.
    await expect(
      messages.processOnce('refunds', 'm-swallowed', (manager) =>
        manager.query('INSERT INTO refunds (id) VALUES ($1)', ['m-swallowed']),
      ),
    ).resolves.toMatchObject({ duplicate: false });
    expect(await count('SELECT 1 FROM refunds WHERE id = $1', 'm-swallowed')).toBe(1);
  });
});
