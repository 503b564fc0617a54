import { connect as connectNats, headers as natsHeaders } from '@nats-io/transport-node';
import amqplib from 'amqplib';
import { randomBytes } from 'node:crypto';
import { NATS_URL, onNats, onRabbitMq, RABBITMQ_URL, until } from '../support/brokers.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/migrated-database.js';
import { startWorker, type WorkerProcess } from '../support/worker-process.js';

/**
 * `@IdempotentMessage({ ack: true })` on a transport that acknowledges by itself. RabbitMQ
 * with `noAck: true` (Nest's default) counts a delivery acknowledged as it is sent: the
 * library's ack then names a delivery tag the broker does not know, and the broker closes the
 * channel (406 PRECONDITION_FAILED), leaving the consumer deaf. So it is refused at start-up,
 * naming `noAck: false`. Core NATS has no acknowledgements: `ack` means nothing there, and a
 * handler that serves RabbitMQ and NATS at once keeps working on both.
 */
const REFUSAL =
  'IdempotencyModule: @IdempotentMessage({ ack: true }) on SettlementsController.settle, ' +
  "SettlementsController.settleKeyed: the RabbitMQ transport runs with noAck: true (Nest's " +
  'default when the option is left out), so the broker counts each delivery acknowledged as ' +
  "it sends it, and the library's ack would close the channel (406 PRECONDITION_FAILED, " +
  "unknown delivery tag). Set noAck: false in the transport's options, or leave ack off";

describe('ack: true on a transport that acknowledges by itself', () => {
  let db: MigratedDatabase;
  const workers: WorkerProcess[] = [];
  const settlements = async (account: string) =>
    Number(
      (
        (await db.dataSource.query('SELECT count(*) AS n FROM settlements WHERE account = $1', [
          account,
        ])) as { n: string }[]
      )[0].n,
    );

  beforeAll(async () => {
    db = await createMigratedDatabase('message_ack');
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
      queue = `idem-ack-${randomBytes(4).toString('hex')}`;
      await channel.assertQueue(`${queue}.dead`, { durable: false });
    });
    afterEach(async () => {
      await channel.deleteQueue(queue);
      await channel.deleteQueue(`${queue}.dead`);
    });
    afterAll(async () => {
      await connection?.close();
    });

    const publish = (account: string) =>
      channel.sendToQueue(
        queue,
        Buffer.from(
          JSON.stringify({ pattern: 'settlement.created', data: { account, amount: 1 } }),
        ),
        { messageId: account },
      );
    const rmq = (extra: Record<string, string>) =>
      start({ TRANSPORT: 'rmq', QUEUE: queue, WORKER: 'ack', ACK: '1', ...extra });

    it.each([
      ["noAck left out (Nest's default)", 'default', '0'],
      ['noAck: true', 'true', '0'],
      ['noAck left out, in an HTTP app with connectMicroservice()', 'default', '1'],
    ])(
      'refuses to start with %s, naming noAck: false',
      async (_what, noAck, hybrid) => {
        const started = rmq({ RMQ_NO_ACK: noAck, HYBRID: hybrid });
        await expect(started).rejects.toThrow(REFUSAL);
      },
      60_000,
    );

    it.each([
      ['a microservice', '0'],
      ['an HTTP app with connectMicroservice()', '1'],
    ])(
      'with noAck: false, %s applies a message once and acknowledges it',
      async (_what, hybrid) => {
        const worker = await rmq({ RMQ_NO_ACK: 'false', HYBRID: hybrid, SETTLEMENTS: '1' });
        const account = `acked-${queue}`;
        publish(account);
        await until(async () => (await settlements(account)) === 1, 'the settlement');
        // The ack follows the commit: killing the worker between the two sends the delivery
        // back, as it should (at least once). So wait for the worker's own ack before the kill.
        await until(async () => worker.output().includes(`settled ${account} ack`), 'the ack');
        await new Promise((resolve) => setTimeout(resolve, 200));
        // Acknowledged: once its consumer is gone, nothing comes back to the queue.
        await worker.kill();
        await new Promise((resolve) => setTimeout(resolve, 500));
        expect((await channel.checkQueue(queue)).messageCount).toBe(0);
        expect(await settlements(account)).toBe(1);
        expect(worker.output()).not.toMatch(/PRECONDITION|unknown delivery tag/);
      },
      60_000,
    );

    it('with noAck left out and ack off, starts and applies a message (the transport acks)', async () => {
      await rmq({ RMQ_NO_ACK: 'default', ACK: '0' });
      const account = `auto-${queue}`;
      publish(account);
      await until(async () => (await settlements(account)) === 1, 'the settlement');
    }, 60_000);
  });

  onNats('on NATS (no acknowledgements)', () => {
    it('with ack: true, starts and applies each message once', async () => {
      const group = `idem-ack-${randomBytes(4).toString('hex')}`;
      const worker = await start({ TRANSPORT: 'nats', QUEUE: group, WORKER: 'n-ack', ACK: '1' });
      const nats = await connectNats({ servers: NATS_URL });
      try {
        const account = `n-ack-${group}`;
        for (let round = 0; round < 2; round++) {
          const headers = natsHeaders();
          headers.set('Nats-Msg-Id', account);
          nats.publish(
            'settlement.created',
            JSON.stringify({ pattern: 'settlement.created', data: { account, amount: 1 } }),
            { headers },
          );
        }
        await nats.flush();
        await until(async () => (await settlements(account)) === 1, 'the settlement');
        await new Promise((resolve) => setTimeout(resolve, 500));
        expect(await settlements(account)).toBe(1);
        expect(worker.output()).not.toMatch(/error/i);
      } finally {
        await nats.close();
      }
    }, 60_000);
  });
});
