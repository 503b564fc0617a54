import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { randomBytes } from 'node:crypto';
import { type INestApplication } from '@nestjs/common';
import { type MicroserviceOptions, Transport } from '@nestjs/microservices';
import {
  connect as connectNats,
  headers as natsHeaders,
  type NatsConnection,
} from '@nats-io/transport-node';
import amqplib from 'amqplib';
import { IDEMPOTENCY_CHANNELS } from '../lib/index.js';
import { recordSettlements, type Settlements } from './support/amqp-settlements.js';
import { BROKERS, NATS_URL, onNats, onRabbitMq, RABBITMQ_URL, until } from './support/brokers.js';
import {
  consumerErrors,
  createOutageApp,
  openGate,
  OUTAGE_CONSUMER,
  type OutageLayer,
  type OutageMessage,
  reachedGate,
  redeliveryGate,
} from './support/outage-app.js';
import { createOutageDatabase, type OutageDatabase } from './support/outage-database.js';
import { MID_WORK_FAULTS as FAULTS, type MidWorkFault } from './support/outage-faults.js';

/**
 * The outage cells of a consumer under `@IdempotentMessage()`, on real brokers: its delivery
 * writes a row through each data layer the library joins, waits at a gate, the database fails
 * under it (its backends terminated, its sockets cut), and the delivery goes on. An outage is
 * not the message's fault: the delivery is put back (RabbitMQ: requeued, never acknowledged
 * nor dead-lettered), its failure is not counted towards `maxAttempts` (2 here: one counted
 * failure too many gives the message up), nothing of its work is kept and its id is not
 * recorded; the redelivery (RabbitMQ's, or the publisher's retry on core NATS, which delivers
 * at most once) applies it once, and a further delivery is a duplicate that applies nothing.
 * And a delivery while the database refuses connections goes back as often as it comes,
 * never given up, until the database is back.
 */
const FAULT_NAMES = Object.keys(FAULTS) as MidWorkFault[];

/** What a delivery the outage failed raises: the library's "deliver it again", as HTTP's 503. */
const STORE_UNAVAILABLE = { name: 'IdempotencyStoreUnavailableError', code: 'store_unavailable' };

/** Within `ms`, or fails saying what was awaited and what the broker heard so far. */
async function within<T>(promise: Promise<T>, ms: number, what: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what()}`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Library events, by message id: duplicates recognized, messages given up. */
const events = { duplicate: [] as string[], gaveUp: [] as string[] };
const onDuplicate = (event: unknown) =>
  events.duplicate.push((event as { messageId: string }).messageId);
const onGaveUp = (event: unknown) => events.gaveUp.push((event as { messageId: string }).messageId);
let settlements: Settlements | undefined;

beforeAll(async () => {
  subscribe(IDEMPOTENCY_CHANNELS.consumerDuplicate, onDuplicate);
  subscribe(IDEMPOTENCY_CHANNELS.consumerGaveUp, onGaveUp);
  if (BROKERS.rabbitmq) settlements = await recordSettlements('tag');
});
afterAll(() => {
  unsubscribe(IDEMPOTENCY_CHANNELS.consumerDuplicate, onDuplicate);
  unsubscribe(IDEMPOTENCY_CHANNELS.consumerGaveUp, onGaveUp);
  settlements?.restore();
});

describe.each([
  ['TypeORM', true, ['typeorm']],
  ['a pg.Pool', false, ['pg', 'prisma', 'drizzle', 'kysely']],
] as const)("a consumer's delivery with the database failing, on %s", (_name, typeorm, layers) => {
  const queue = `idem-outage-msg-${randomBytes(4).toString('hex')}`;
  let db: OutageDatabase;
  let app: INestApplication;
  let amqp: amqplib.ChannelModel | undefined;
  let channel: amqplib.Channel;
  let nats: NatsConnection | undefined;

  beforeAll(async () => {
    db = await createOutageDatabase(`outage_messages_${typeorm ? 'typeorm' : 'pool'}`, typeorm);
    app = await createOutageApp(db.viaProxy, typeorm, { graphql: false });
    if (BROKERS.rabbitmq) {
      amqp = await amqplib.connect(RABBITMQ_URL);
      channel = await amqp.createChannel();
      await channel.assertQueue(`${queue}.dead`, { durable: false });
      app.connectMicroservice<MicroserviceOptions>({
        transport: Transport.RMQ,
        options: {
          urls: [RABBITMQ_URL],
          queue,
          noAck: false,
          prefetchCount: 4,
          queueOptions: {
            durable: false,
            arguments: {
              'x-dead-letter-exchange': '',
              'x-dead-letter-routing-key': `${queue}.dead`,
            },
          },
        },
      });
    }
    if (BROKERS.nats) {
      nats = await connectNats({ servers: NATS_URL });
      app.connectMicroservice<MicroserviceOptions>({
        transport: Transport.NATS,
        options: { servers: [NATS_URL], queue },
      });
    }
    await app.startAllMicroservices();
  });

  afterAll(async () => {
    await app?.close();
    if (amqp) {
      await channel.deleteQueue(queue);
      await channel.deleteQueue(`${queue}.dead`);
      await amqp.close();
    }
    await nats?.close();
    await db?.drop();
  });

  /** What the database kept of the message `tag`: its rows, its record, its counted failures. */
  const kept = async (tag: string) =>
    (
      await db.read<{ rows: number[]; processed: number; failures: number[] }>(
        `SELECT
           ARRAY(SELECT n FROM outage_rows WHERE tag = $2 ORDER BY n) AS rows,
           (SELECT count(*)::int FROM processed_messages
            WHERE consumer = $1 AND message_id = $2) AS processed,
           ARRAY(SELECT attempts FROM message_failures
                 WHERE consumer = $1 AND message_id = $2) AS failures`,
        [OUTAGE_CONSUMER, tag],
      )
    )[0];
  const nothingKept = { rows: [], processed: 0, failures: [] };
  const appliedOnce = { rows: [1, 2], processed: 1, failures: [] };

  const cells = layers.flatMap((layer) =>
    FAULT_NAMES.map((fault) => [layer, fault] as [OutageLayer, MidWorkFault]),
  );

  onRabbitMq('on RabbitMQ (ack: true, noAck: false)', () => {
    const publish = (message: OutageMessage) =>
      channel.sendToQueue(
        queue,
        Buffer.from(JSON.stringify({ pattern: 'outage.write', data: message })),
        { messageId: message.tag },
      );
    const heard = (tag: string) => settlements!.of(tag);
    const depths = async () => ({
      ready: (await channel.checkQueue(queue)).messageCount,
      dead: (await channel.checkQueue(`${queue}.dead`)).messageCount,
    });

    it.each(cells)(
      '%s: when %s, requeued, not counted, nothing kept; the redelivery applies it once',
      async (layer, fault) => {
        const tag = `${layer}-rmq-${fault.split(' ')[3]}`;
        publish({ layer, tag });
        await within(reachedGate(tag), 10_000, () => `${tag} at its gate`);
        await FAULTS[fault](db.database, db.proxy);
        openGate(tag);

        // The redelivery at its gate has recorded the id: the first delivery's record rolled back.
        await within(reachedGate(redeliveryGate(tag)), 10_000, () => {
          return `the redelivery of ${tag} (the broker heard: ${heard(tag).join(', ') || 'nothing'})`;
        });
        expect(heard(tag)).toEqual(['requeue']);
        expect(await kept(tag)).toEqual(nothingKept);
        expect(events.gaveUp).not.toContain(tag);

        openGate(redeliveryGate(tag));
        await until(async () => heard(tag).length === 2, `${tag}'s redelivery settled`, 10_000);
        expect(heard(tag)).toEqual(['requeue', 'ack']);
        expect(await kept(tag)).toEqual(appliedOnce);

        publish({ layer, tag });
        await until(async () => heard(tag).length === 3, `${tag}'s duplicate settled`, 10_000);
        expect(heard(tag)).toEqual(['requeue', 'ack', 'ack']);
        expect(events.duplicate).toContain(tag);
        expect(await kept(tag)).toEqual(appliedOnce);
        expect(await depths()).toEqual({ ready: 0, dead: 0 });
        expect(consumerErrors.get(tag)).toEqual([STORE_UNAVAILABLE]);
      },
    );

    it('while the database refuses connections, requeued however often, never given up; applied once it is back', async () => {
      const tag = `${layers[0]}-rmq-refused`;
      openGate(tag); // the delivery after the outage goes straight through
      await db.proxy.refuse();
      try {
        publish({ layer: layers[0], tag });
        // maxAttempts is 2: had the outage counted (in the table, or in this process when the
        // count could not be stored), the second delivery would have been rejected, its last.
        await until(async () => heard(tag).length >= 2, `two deliveries of ${tag}`, 10_000);
      } finally {
        await db.proxy.restore();
      }
      await until(async () => heard(tag).at(-1) === 'ack', `${tag} applied`, 10_000);
      const outcomes = heard(tag);
      expect(outcomes.slice(0, -1)).toEqual(outcomes.slice(0, -1).map(() => 'requeue'));
      expect(events.gaveUp).not.toContain(tag);
      expect(await kept(tag)).toEqual(appliedOnce);
      expect(await depths()).toEqual({ ready: 0, dead: 0 });
      expect(consumerErrors.get(tag)).toEqual(outcomes.slice(0, -1).map(() => STORE_UNAVAILABLE));
    });
  });

  // The transport does not change how a failure is classified (RabbitMQ's cells run every data
  // layer): one data layer a side shows that core NATS, without acknowledgements, loses nothing
  // the publisher retries.
  onNats('on core NATS (at most once: the publisher retries)', () => {
    const publish = (message: OutageMessage) => {
      const headers = natsHeaders();
      headers.set('Nats-Msg-Id', message.tag);
      nats!.publish('outage.write', JSON.stringify({ pattern: 'outage.write', data: message }), {
        headers,
      });
      return nats!.flush();
    };

    it.each(cells.filter(([layer]) => layer === layers[0]))(
      '%s: when %s, not counted, nothing kept; the retried publish applies it once',
      async (layer, fault) => {
        const tag = `${layer}-nats-${fault.split(' ')[3]}`;
        await publish({ layer, tag });
        await within(reachedGate(tag), 10_000, () => `${tag} at its gate`);
        await FAULTS[fault](db.database, db.proxy);
        openGate(tag);
        await publish({ layer, tag }); // the publisher's retry, as it sees no success

        // At its gate, the retry has recorded the id: the first delivery's record rolled back.
        await within(reachedGate(redeliveryGate(tag)), 10_000, () => `the retry of ${tag}`);
        expect(await kept(tag)).toEqual(nothingKept);

        openGate(redeliveryGate(tag));
        await until(async () => (await kept(tag)).processed === 1, `${tag} applied`, 10_000);
        expect(await kept(tag)).toEqual(appliedOnce);

        await publish({ layer, tag });
        await until(async () => events.duplicate.includes(tag), `${tag}'s duplicate`, 10_000);
        expect(await kept(tag)).toEqual(appliedOnce);
        expect(consumerErrors.get(tag)).toEqual([STORE_UNAVAILABLE]);
      },
    );
  });
});
