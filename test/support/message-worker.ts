/**
 * A consumer app of its own process, for the message tests: a Nest microservice on RabbitMQ
 * or NATS whose one event handler records a settlement in PostgreSQL through
 * `@IdempotentMessage()`. A real process, so that a test can kill it where it needs to.
 *
 * Env: DATABASE_URL, TRANSPORT (rmq | nats), QUEUE, WORKER (its name in the rows it writes),
 * MAX_ATTEMPTS, KILL_BEFORE_ACK=1 to SIGKILL itself at its first acknowledgement: after
 * the delivery's transaction committed, before the broker hears of it, and SETTLEMENTS=1 to
 * print each delivery's settlement with RabbitMQ (`settled <account> ack|requeue|reject`), so
 * that a test counts deliveries as the broker saw them. ACK=1 or 0 sets `@IdempotentMessage()`'s
 * `ack` (by default on for RabbitMQ only); RMQ_NO_ACK=true, false or default (the option left
 * out: Nest's default, true) sets the RabbitMQ transport's `noAck` (by default false); HYBRID=1
 * starts it as an HTTP app with the transport connected (`connectMicroservice()`). MIGRATE=0
 * runs no migrations (a consumer whose migrations were forgotten).
 *
 * Two handlers: `settlement.created` takes the transport's message id, `settlement.keyed` the
 * payload's `id` (the decorator's `messageId` option).
 */
import 'reflect-metadata';
import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, type MicroserviceOptions, Payload, Transport } from '@nestjs/microservices';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import amqplib from 'amqplib';
import { type DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, IdempotentMessage } from '../../lib/index.js';

const env = process.env;
const worker = env.WORKER ?? 'worker';

if (env.KILL_BEFORE_ACK === '1' || env.SETTLEMENTS === '1') {
  // amqplib exports no Channel class: reach its prototype through a channel of its own.
  const probe = await amqplib.connect('amqp://guest:guest@127.0.0.1:5672');
  const channel = await probe.createChannel();
  const prototype = Object.getPrototypeOf(channel) as {
    ack(message: amqplib.Message): void;
    nack(message: amqplib.Message, all?: boolean, requeue?: boolean): void;
  };
  await probe.close();
  if (env.KILL_BEFORE_ACK === '1') prototype.ack = () => process.kill(process.pid, 'SIGKILL');
  if (env.SETTLEMENTS === '1') {
    const { ack, nack } = prototype;
    const account = (message: amqplib.Message) => {
      try {
        const { data } = JSON.parse(message.content.toString()) as { data: { account: string } };
        return data.account;
      } catch {
        return '?';
      }
    };
    prototype.ack = function (message) {
      console.log(`settled ${account(message)} ack`);
      return ack.call(this, message);
    };
    prototype.nack = function (message, all, requeue) {
      console.log(`settled ${account(message)} ${requeue === false ? 'reject' : 'requeue'}`);
      return nack.call(this, message, all, requeue);
    };
  }
}

const ack = env.ACK === undefined ? env.TRANSPORT === 'rmq' : env.ACK === '1';
const noAck =
  env.RMQ_NO_ACK === 'default'
    ? {}
    : { noAck: env.RMQ_NO_ACK === undefined ? false : env.RMQ_NO_ACK === 'true' };

interface Settlement {
  account: string;
  amount: number;
  /** Makes the handler fail after its write: a poison message. */
  poison?: boolean;
  /** Makes the handler fail after its write with this error message. */
  error?: string;
  /** The message's id, for `settlement.keyed`. */
  id?: unknown;
  /** Holds the handler after its write, so that deliveries overlap. */
  delayMs?: number;
}

@Controller()
class SettlementsController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @EventPattern('settlement.created')
  @IdempotentMessage({ ack, maxAttempts: Number(env.MAX_ATTEMPTS ?? 5) })
  async settle(@Payload() settlement: Settlement) {
    await this.dataSource.query(
      'INSERT INTO settlements (account, amount, worker) VALUES ($1, $2, $3)',
      [settlement.account, settlement.amount, worker],
    );
    await this.dataSource.query('INSERT INTO attempts (account, worker) VALUES ($1, $2)', [
      settlement.account,
      worker,
    ]);
    if (settlement.delayMs) await new Promise((resolve) => setTimeout(resolve, settlement.delayMs));
    if (settlement.poison) throw new Error(`settlement ${settlement.account} is poison`);
    if (settlement.error !== undefined) throw new Error(settlement.error);
  }

  @EventPattern('settlement.keyed')
  @IdempotentMessage({
    ack,
    maxAttempts: Number(env.MAX_ATTEMPTS ?? 5),
    messageId: (data) => (data as Settlement).id,
  })
  settleKeyed(@Payload() settlement: Settlement) {
    return this.settle(settlement);
  }
}

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: env.DATABASE_URL,
      migrations: env.MIGRATE === '0' ? [] : [...IDEMPOTENCY_MIGRATIONS],
      migrationsRun: env.MIGRATE !== '0',
      logging: false,
    }),
    IdempotencyModule.forRoot({ globalKeys: true }),
  ],
  controllers: [SettlementsController],
})
class WorkerModule {}

const transport: MicroserviceOptions =
  env.TRANSPORT === 'nats'
    ? {
        transport: Transport.NATS,
        options: { servers: ['nats://127.0.0.1:4222'], queue: env.QUEUE },
      }
    : {
        transport: Transport.RMQ,
        options: {
          urls: ['amqp://guest:guest@127.0.0.1:5672'],
          queue: env.QUEUE,
          ...noAck,
          prefetchCount: 4,
          queueOptions: {
            durable: false,
            arguments: {
              'x-dead-letter-exchange': '',
              'x-dead-letter-routing-key': `${env.QUEUE}.dead`,
            },
          },
        },
      };

const logger = env.TEST_LOGS ? undefined : (['error', 'warn'] as const);
if (env.HYBRID === '1') {
  // An HTTP app with the transport connected, started as Nest's docs show.
  const app = await NestFactory.create(WorkerModule, { logger: logger && [...logger] });
  app.connectMicroservice<MicroserviceOptions>(transport);
  await app.startAllMicroservices();
  await app.listen(0, '127.0.0.1');
  console.log('listening on 0');
  process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
} else {
  const app = await NestFactory.createMicroservice<MicroserviceOptions>(WorkerModule, {
    ...transport,
    logger: logger && [...logger],
  });
  await app.listen();
  console.log('listening on 0');
  process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
}
