import { connect as connectNats, headers as natsHeaders } from '@nats-io/transport-node';
import amqplib from 'amqplib';
import { randomBytes } from 'node:crypto';
import { NATS_URL, onNats, onRabbitMq, RABBITMQ_URL, until } from './support/brokers.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';
import { TcpProxy } from './support/tcp-proxy.js';
import { startWorker, type WorkerProcess } from './support/worker-process.js';

/**
 * Messages whose id or failure PostgreSQL cannot store as given: a NUL character (which no
 * PostgreSQL text holds), a lone surrogate (not Unicode, so not UTF-8), 10 KB. Each delivery
 * is counted as the broker saw it (the worker prints its settlements), and each message must
 * end in the dead letters after a bounded number of deliveries, whatever failed while counting:
 * a poison message redelivered for ever stalls its queue.
 */
describe('messages PostgreSQL cannot store as given', () => {
  let db: MigratedDatabase;
  const query = async <T>(sql: string, values: unknown[] = []) =>
    (await db.dataSource.query(sql, values)) as T[];

  beforeAll(async () => {
    db = await createMigratedDatabase('poison');
    await db.dataSource.query(
      'CREATE TABLE settlements (id serial PRIMARY KEY, account text, amount int, worker text)',
    );
    await db.dataSource.query('CREATE TABLE attempts (account text, worker text)');
    // A real failure of the count itself (as a full disk or a lost permission would be), for
    // the messages whose id says so.
    await db.dataSource.query(`
      CREATE FUNCTION refuse_count() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'counting % refused', NEW.message_id; END $$`);
    await db.dataSource.query(`
      CREATE TRIGGER refuse_count BEFORE INSERT OR UPDATE ON message_failures FOR EACH ROW
      WHEN (NEW.message_id LIKE 'uncountable-%') EXECUTE FUNCTION refuse_count()`);
  });
  afterAll(() => db?.drop());

  const failureOf = async (messageId: string) =>
    (
      await query<{ attempts: number; last_error: string }>(
        'SELECT attempts, last_error FROM message_failures WHERE message_id = $1',
        [messageId],
      )
    )[0];
  const applied = async (account: string) =>
    (await query('SELECT 1 FROM settlements WHERE account = $1', [account])).length;

  onRabbitMq('on RabbitMQ', () => {
    let connection: amqplib.ChannelModel;
    let channel: amqplib.Channel;
    let worker: WorkerProcess;
    const queue = `idem-poison-${randomBytes(4).toString('hex')}`;
    const dead: string[] = [];

    beforeAll(async () => {
      connection = await amqplib.connect(RABBITMQ_URL);
      channel = await connection.createChannel();
      await channel.assertQueue(`${queue}.dead`, { durable: false });
      worker = await startWorker('test/support/message-worker.js', {
        DATABASE_URL: db.url,
        TRANSPORT: 'rmq',
        QUEUE: queue,
        WORKER: 'poisoned',
        MAX_ATTEMPTS: '3',
        SETTLEMENTS: '1',
      });
    });
    afterAll(async () => {
      await worker?.kill();
      await channel?.deleteQueue(queue);
      await channel?.deleteQueue(`${queue}.dead`);
      await connection?.close();
    });

    const publish = (pattern: string, data: object, messageId?: string) =>
      channel.sendToQueue(
        queue,
        Buffer.from(JSON.stringify({ pattern, data })),
        messageId === undefined ? {} : { messageId },
      );
    /** Whether `account`'s message is in the dead letters (read off the queue as they come). */
    const deadLettered = async (account: string) => {
      for (;;) {
        const message = await channel.get(`${queue}.dead`, { noAck: true });
        if (message === false) break;
        const { data } = JSON.parse(message.content.toString()) as { data: { account: string } };
        dead.push(data.account);
      }
      return dead.includes(account);
    };
    /** How the broker heard of each delivery of `account`'s message, in order. */
    const settlements = (account: string) =>
      [...worker.output().matchAll(/^settled (\S+) (\w+)$/gm)]
        .filter(([, which]) => which === account)
        .map(([, , outcome]) => outcome);
    /** Waits (at most 10 s) for the dead letter, then reports where the message ended. */
    const ending = async (account: string) => {
      await until(() => deadLettered(account), `${account}'s dead letter`, 10_000).catch(
        () => undefined,
      );
      return {
        deadLettered: await deadLettered(account),
        deliveries: settlements(account),
        applied: await applied(account),
      };
    };
    const refused = { deadLettered: true, deliveries: ['reject'], applied: 0 };
    const givenUp = {
      deadLettered: true,
      deliveries: ['requeue', 'requeue', 'reject'],
      applied: 0,
    };

    it.each([
      ['a NUL', 'm-nul-\u0000-id', 'holds a NUL character'],
      ['255 characters and a NUL', `${'m'.repeat(254)}\u0000`, 'holds a NUL character'],
    ])(
      'refuses an AMQP message-id with %s to the dead letters, saying why',
      async (_name, messageId, reason) => {
        const account = `amqp-id-${randomBytes(3).toString('hex')}`;
        publish('settlement.created', { account, amount: 1 }, messageId);
        expect(await ending(account)).toEqual(refused);
        expect(worker.output()).toContain(
          `@IdempotentMessage() on SettlementsController.settle: the message id ` +
            `${JSON.stringify(messageId).slice(0, 60)}`,
        );
        expect(worker.output()).toContain(`cannot be stored: it ${reason}`);
        // Not counted either (a statement carrying it fails as the record did).
        const upToNul = `${messageId.split('\u0000')[0]}%`;
        expect(
          await query('SELECT message_id FROM message_failures WHERE message_id LIKE $1', [
            upToNul,
          ]),
        ).toEqual([]);
      },
    );

    it.each([
      ['a NUL', 'k-nul-\u0000', 'holds a NUL character'],
      ['a lone surrogate', 'k-lone-\ud800-x', 'holds a lone surrogate (not Unicode)'],
      ['10 KB', 'k'.repeat(10_240), 'is over 255 characters'],
    ])('refuses a payload id with %s to the dead letters, saying why', async (_n, id, reason) => {
      const account = `payload-id-${randomBytes(3).toString('hex')}`;
      publish('settlement.keyed', { account, amount: 1, id });
      expect(await ending(account)).toEqual(refused);
      expect(worker.output()).toContain(
        `@IdempotentMessage() on SettlementsController.settleKeyed: the message id ` +
          `${JSON.stringify(id).slice(0, 60)}`,
      );
      expect(worker.output()).toContain(`cannot be stored: it ${reason}`);
    });

    it.each([
      ['a NUL', 'bad\u0000byte', 'Error: bad\\u0000byte'],
      ['a lone surrogate', 'half \ud800 pair', 'Error: half \ufffd pair'],
      ['10 KB', 'x'.repeat(10_240), `Error: ${'x'.repeat(992)}…`],
      ['10 KB cut inside a surrogate pair', `${'x'.repeat(991)}😀😀`, `Error: ${'x'.repeat(991)}…`],
    ])(
      'counts a handler error with %s, storably, and gives the message up after maxAttempts',
      async (_name, error, stored) => {
        const account = `err-${randomBytes(3).toString('hex')}`;
        const messageId = `m-${account}`;
        publish('settlement.created', { account, amount: 1, error }, messageId);
        expect(await ending(account)).toEqual(givenUp);
        expect(await failureOf(messageId)).toEqual({ attempts: 3, last_error: stored });
      },
    );

    it('gives a message up after maxAttempts when its failures cannot be counted', async () => {
      const account = `uncounted-${randomBytes(3).toString('hex')}`;
      publish('settlement.created', { account, amount: 1, poison: true }, `uncountable-${account}`);
      // The message behind it is not held up.
      publish('settlement.created', { account: `${account}-next`, amount: 1 }, `m-${account}-next`);
      expect(await ending(account)).toEqual(givenUp);
      expect(await failureOf(`uncountable-${account}`)).toBeUndefined();
      expect(settlements(`${account}-next`)).toEqual(['ack']);
      expect(await applied(`${account}-next`)).toBe(1);
      expect(worker.output()).toContain(
        `a failed delivery of uncountable-${account} was not counted`,
      );
    });
  });

  onRabbitMq('on RabbitMQ, with the database down', () => {
    let connection: amqplib.ChannelModel;
    let channel: amqplib.Channel;
    let worker: WorkerProcess;
    let proxy: TcpProxy;
    const queue = `idem-outage-${randomBytes(4).toString('hex')}`;

    beforeAll(async () => {
      connection = await amqplib.connect(RABBITMQ_URL);
      channel = await connection.createChannel();
      await channel.assertQueue(`${queue}.dead`, { durable: false });
      // To the test's server, wherever it runs (the embedded one of a run without
      // TEST_DATABASE_URL listens on a port of its own).
      const url = new URL(db.url);
      proxy = new TcpProxy(url.hostname, Number(url.port || 5432));
      await proxy.start();
      url.port = String(proxy.port);
      worker = await startWorker('test/support/message-worker.js', {
        DATABASE_URL: url.toString(),
        TRANSPORT: 'rmq',
        QUEUE: queue,
        WORKER: 'outage',
        MAX_ATTEMPTS: '3',
        SETTLEMENTS: '1',
      });
    });
    afterAll(async () => {
      await worker?.kill();
      await proxy?.stop();
      await channel?.deleteQueue(queue);
      await channel?.deleteQueue(`${queue}.dead`);
      await connection?.close();
    });

    it('neither dead-letters a message nor spins on it while the database is unreachable', async () => {
      const account = `outage-${randomBytes(3).toString('hex')}`;
      await proxy.refuse();
      channel.sendToQueue(
        queue,
        Buffer.from(
          JSON.stringify({ pattern: 'settlement.created', data: { account, amount: 1 } }),
        ),
        { messageId: `m-${account}` },
      );
      await new Promise((resolve) => setTimeout(resolve, 3000));
      const during = [
        ...worker.output().matchAll(new RegExp(`^settled ${account} (\\w+)$`, 'gm')),
      ].map(([, outcome]) => outcome);
      // Backed off (0.1, 0.2, 0.4, 0.8, 1.6 s...): a handful in 3 s, each put back, none given up.
      expect(during.length).toBeGreaterThanOrEqual(2);
      expect(during.length).toBeLessThanOrEqual(12);
      expect(new Set(during)).toEqual(new Set(['requeue']));
      await proxy.restore();
      await until(async () => (await applied(account)) === 1, 'the delivery after the outage');
      expect((await channel.checkQueue(`${queue}.dead`)).messageCount).toBe(0);
      expect(await failureOf(`m-${account}`)).toBeUndefined(); // the outage counted nothing
    });
  });

  onNats('on NATS', () => {
    let worker: WorkerProcess;
    const group = `idem-poison-${randomBytes(4).toString('hex')}`;
    beforeAll(async () => {
      worker = await startWorker('test/support/message-worker.js', {
        DATABASE_URL: db.url,
        TRANSPORT: 'nats',
        QUEUE: group,
        WORKER: 'n-poisoned',
      });
    });
    afterAll(() => worker?.kill());

    const publish = async (id: string, data: object) => {
      const nats = await connectNats({ servers: NATS_URL });
      try {
        const headers = natsHeaders();
        headers.set('Nats-Msg-Id', id);
        nats.publish(
          'settlement.created',
          JSON.stringify({ pattern: 'settlement.created', data }),
          {
            headers,
          },
        );
        await nats.flush();
      } finally {
        await nats.close();
      }
    };

    it.each([
      ['a NUL', (account: string) => `n-nul-\u0000-${account}`, 'holds a NUL character'],
      ['10 KB', (account: string) => `${account}-${'n'.repeat(10_240)}`, 'is over 255 characters'],
    ])(
      'refuses a Nats-Msg-Id with %s, saying why, and applies the next message',
      async (_name, idOf, reason) => {
        const account = `n-id-${randomBytes(3).toString('hex')}`;
        await publish(idOf(account), { account, amount: 1 });
        await publish(`n-${account}-next`, { account: `${account}-next`, amount: 1 });
        await until(async () => (await applied(`${account}-next`)) === 1, 'the next message');
        expect(await applied(account)).toBe(0);
        expect(worker.output()).toContain(
          `the message id ${JSON.stringify(idOf(account)).slice(0, 60)}`,
        );
        expect(worker.output()).toContain(`cannot be stored: it ${reason}`);
      },
    );

    it('counts a handler error with a NUL, storably', async () => {
      const account = `n-err-${randomBytes(3).toString('hex')}`;
      await publish(`n-${account}`, { account, amount: 1, error: 'bad\u0000byte' });
      await until(async () => (await failureOf(`n-${account}`)) !== undefined, 'the count');
      expect(await failureOf(`n-${account}`)).toEqual({
        attempts: 1,
        last_error: 'Error: bad\\u0000byte',
      });
    });
  });
});
