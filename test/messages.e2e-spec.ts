import { connect as connectNats, headers as natsHeaders } from '@nats-io/transport-node';
import amqplib from 'amqplib';
import { randomBytes } from 'node:crypto';
import { NATS_URL, onNats, onRabbitMq, RABBITMQ_URL, until } from './support/brokers.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';
import { startWorker, type WorkerProcess } from './support/worker-process.js';

/**
 * `@IdempotentMessage()` against the real brokers of this machine: consumer apps in processes
 * of their own (test/support/message-worker.ts), messages published as another service would,
 * and every effect counted in PostgreSQL.
 */
describe('message handlers applied once per message id', () => {
  let db: MigratedDatabase;
  const workers: WorkerProcess[] = [];
  const query = async <T>(sql: string, values: unknown[] = []) =>
    (await db.dataSource.query(sql, values)) as T[];
  const settlements = async (account: string) =>
    Number(
      (
        await query<{ n: string }>('SELECT count(*) AS n FROM settlements WHERE account = $1', [
          account,
        ])
      )[0].n,
    );

  beforeAll(async () => {
    db = await createMigratedDatabase('messages');
    await db.dataSource.query(
      'CREATE TABLE settlements (id serial PRIMARY KEY, account text, amount int, worker text)',
    );
    await db.dataSource.query('CREATE TABLE attempts (account text, worker text)');
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((worker) => worker.kill()));
  });
  afterAll(() => db?.drop());

  const start = async (env: Record<string, string>) => {
    const worker = await startWorker('test/support/message-worker.js', {
      DATABASE_URL: db.url,
      ...env,
    });
    workers.push(worker);
    return worker;
  };

  onRabbitMq('on RabbitMQ', () => {
    let connection: amqplib.ChannelModel;
    let channel: amqplib.Channel;
    let queue: string;

    beforeAll(async () => {
      connection = await amqplib.connect(RABBITMQ_URL);
      channel = await connection.createChannel();
    });
    beforeEach(async () => {
      queue = `idem-test-${randomBytes(4).toString('hex')}`;
      await channel.assertQueue(`${queue}.dead`, { durable: false });
    });
    afterEach(async () => {
      await channel.deleteQueue(queue);
      await channel.deleteQueue(`${queue}.dead`);
    });
    afterAll(async () => {
      await connection?.close();
    });

    const publish = (data: object, messageId?: string) =>
      channel.sendToQueue(
        queue,
        Buffer.from(JSON.stringify({ pattern: 'settlement.created', data })),
        messageId === undefined ? {} : { messageId },
      );
    const ready = async (name = queue) => (await channel.checkQueue(name)).messageCount;
    const rmq = (worker: string, extra: Record<string, string> = {}) =>
      start({ TRANSPORT: 'rmq', QUEUE: queue, WORKER: worker, ...extra });

    it('applies a message delivered twice once, and acknowledges both', async () => {
      const consumer = await rmq('a');
      publish({ account: 'twice', amount: 5 }, 'm-twice');
      publish({ account: 'twice', amount: 5 }, 'm-twice');
      await until(
        async () =>
          (await query('SELECT 1 FROM processed_messages WHERE message_id = $1', ['m-twice']))
            .length === 1,
        'the first delivery',
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
      await consumer.kill('SIGTERM'); // an unacknowledged delivery would go back to the queue
      expect(await ready()).toBe(0);
      expect(await settlements('twice')).toBe(1);
    });

    it('applies nothing twice when a consumer is killed between its commit and its ack', async () => {
      const doomed = await rmq('doomed', { KILL_BEFORE_ACK: '1' });
      const died = new Promise((resolve) => doomed.child.once('exit', resolve));
      publish({ account: 'killed', amount: 7 }, 'm-killed');
      await died;
      expect(doomed.child.signalCode).toBe('SIGKILL');
      // Committed before the kill; unacknowledged, so the broker has it again.
      expect(await settlements('killed')).toBe(1);
      await until(async () => (await ready()) === 1, 'the redelivery');

      const survivor = await rmq('survivor');
      await until(async () => (await ready()) === 0, 'the survivor to take it');
      await new Promise((resolve) => setTimeout(resolve, 300));
      await survivor.kill('SIGTERM');
      expect(await ready()).toBe(0); // taken and acknowledged, not requeued
      expect(await settlements('killed')).toBe(1);
    });

    it('never applies a message twice with two consumers on one queue', async () => {
      await Promise.all([rmq('one'), rmq('two')]);
      const ids = Array.from({ length: 30 }, (_, i) => `m-pair-${i}`);
      for (const id of ids) publish({ account: id, amount: 1, delayMs: 20 }, id);
      for (const id of ids) publish({ account: id, amount: 1, delayMs: 20 }, id);
      await until(
        async () =>
          Number(
            (
              await query<{ n: string }>(
                "SELECT count(*) AS n FROM processed_messages WHERE message_id LIKE 'm-pair-%'",
              )
            )[0].n,
          ) === ids.length && (await ready()) === 0,
        'every message',
      );
      await new Promise((resolve) => setTimeout(resolve, 500));
      const rows = await query<{ account: string; n: string }>(
        "SELECT account, count(*) AS n FROM settlements WHERE account LIKE 'm-pair-%' GROUP BY account",
      );
      expect(rows).toHaveLength(ids.length);
      expect(rows.filter(({ n }) => n !== '1')).toEqual([]);
      const workersUsed = await query<{ worker: string }>(
        "SELECT DISTINCT worker FROM settlements WHERE account LIKE 'm-pair-%'",
      );
      expect(workersUsed.map(({ worker }) => worker).sort()).toEqual(['one', 'two']);
    });

    it('gives a poison message up after maxAttempts deliveries, to the dead-letter queue', async () => {
      await rmq('poisoned', { MAX_ATTEMPTS: '3' });
      publish({ account: 'poison', amount: 1, poison: true }, 'm-poison');
      await until(async () => (await ready(`${queue}.dead`)) === 1, 'the dead letter');
      const [failure] = await query<{ attempts: number; last_error: string }>(
        'SELECT attempts, last_error FROM message_failures WHERE message_id = $1',
        ['m-poison'],
      );
      expect(failure.attempts).toBe(3);
      expect(failure.last_error).toBe('Error: settlement poison is poison');
      expect(await settlements('poison')).toBe(0); // each attempt rolled back
      expect(
        await query('SELECT 1 FROM processed_messages WHERE message_id = $1', ['m-poison']),
      ).toEqual([]);
      expect(await ready()).toBe(0);
    });

    it('rejects a message without an id rather than applying it unguarded', async () => {
      await rmq('strict');
      publish({ account: 'no-id', amount: 1 });
      await until(async () => (await ready(`${queue}.dead`)) === 1, 'the dead letter');
      expect(await settlements('no-id')).toBe(0);
    });
  });

  onNats('on NATS', () => {
    it('never applies a message twice with two consumers in one queue group', async () => {
      const group = `idem-${randomBytes(4).toString('hex')}`;
      await Promise.all(
        ['n-one', 'n-two'].map((worker) =>
          start({ TRANSPORT: 'nats', QUEUE: group, WORKER: worker }),
        ),
      );
      const nats = await connectNats({ servers: NATS_URL });
      try {
        const ids = Array.from({ length: 30 }, (_, i) => `n-${group}-${i}`);
        // Every message published twice, as a publisher that retried after a timeout would.
        for (let round = 0; round < 2; round++) {
          for (const id of ids) {
            const headers = natsHeaders();
            headers.set('Nats-Msg-Id', id);
            nats.publish(
              'settlement.created',
              JSON.stringify({ pattern: 'settlement.created', data: { account: id, amount: 1 } }),
              { headers },
            );
          }
        }
        await nats.flush();
        await until(
          async () =>
            Number(
              (
                await query<{ n: string }>(
                  'SELECT count(*) AS n FROM processed_messages WHERE message_id LIKE $1',
                  [`n-${group}-%`],
                )
              )[0].n,
            ) === ids.length,
          'every message',
        );
        await new Promise((resolve) => setTimeout(resolve, 500));
        const rows = await query<{ account: string; n: string }>(
          'SELECT account, count(*) AS n FROM settlements WHERE account LIKE $1 GROUP BY account',
          [`n-${group}-%`],
        );
        expect(rows).toHaveLength(ids.length);
        expect(rows.filter(({ n }) => n !== '1')).toEqual([]);
        const duplicates = await query<{ n: string }>(
          'SELECT count(*) AS n FROM attempts WHERE account LIKE $1',
          [`n-${group}-%`],
        );
        expect(Number(duplicates[0].n)).toBe(ids.length); // the duplicates ran no handler
      } finally {
        await nats.close();
      }
    });
  });
});
