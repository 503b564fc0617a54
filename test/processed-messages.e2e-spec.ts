import { type DataSource } from 'typeorm';
import { ProcessedMessages, TransientDatabaseError } from '../lib/index.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { type ResolvedIdempotencyOptions } from '../lib/shapes/idempotency-options.interface.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';

/** What a consumer's delivery throws, on real PostgreSQL: the database's failures mapped, the effect's own not. */
describe('ProcessedMessages errors', () => {
  let database: MigratedDatabase;
  let dataSource: DataSource;
  let messages: ProcessedMessages;

  beforeAll(async () => {
    database = await createMigratedDatabase('processed');
    dataSource = database.dataSource;
    messages = new ProcessedMessages(
      new IdempotencyDatabase(() => dataSource, 5000),
      {} as ResolvedIdempotencyOptions,
    );
  });
  afterAll(async () => {
    await database?.drop();
  });

  const recorded = async (id: string) =>
    ((await dataSource.query('SELECT 1 FROM processed_messages WHERE message_id = $1', [id])) as [])
      .length;

  it('lets the effect’s own failure through as it is (a PSP refusing connections is not the database)', async () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:443'), {
      code: 'ECONNREFUSED',
    });
    await expect(messages.processOnce('c', 'm-own', () => Promise.reject(refused))).rejects.toBe(
      refused,
    );
    expect(await recorded('m-own')).toBe(0);
  });

  it.each([
    [
      'an id with a NUL',
      'consumer',
      'a\u0000b',
      'messageId cannot be stored: it holds a NUL character',
    ],
    [
      'an id with a lone surrogate',
      'consumer',
      'a\ud800b',
      'messageId cannot be stored: it holds a lone surrogate (not Unicode)',
    ],
    [
      'a consumer name with a NUL',
      'c\u0000',
      'm-ok',
      'consumer cannot be stored: it holds a NUL character',
    ],
  ])('refuses %s before any statement, running nothing', async (_n, consumer, id, message) => {
    let ran = false;
    const effect = () => {
      ran = true;
      return Promise.resolve();
    };
    const error = await messages.processOnce(consumer, id, effect).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RangeError);
    expect((error as Error).message).toBe(message);
    expect(ran).toBe(false);
  });

  it('maps a transient failure of the effect’s statement (a lock timeout) to TransientDatabaseError', async () => {
    await dataSource.query('CREATE TABLE IF NOT EXISTS locked (id int PRIMARY KEY)');
    await dataSource.query('INSERT INTO locked VALUES (1) ON CONFLICT DO NOTHING');
    const holder = dataSource.createQueryRunner();
    await holder.startTransaction();
    await holder.query('SELECT * FROM locked WHERE id = 1 FOR UPDATE');
    try {
      await expect(
        messages.processOnce('c', 'm-lock', async (manager) => {
          await manager.query('SET LOCAL lock_timeout = 50');
          await manager.query('SELECT * FROM locked WHERE id = 1 FOR UPDATE');
        }),
      ).rejects.toBeInstanceOf(TransientDatabaseError);
    } finally {
      await holder.rollbackTransaction();
      await holder.release();
    }
    expect(await recorded('m-lock')).toBe(0);
    const again = await messages.processOnce('c', 'm-lock', () => Promise.resolve('applied'));
    expect(again).toEqual({ duplicate: false, result: 'applied' });
  });
});
