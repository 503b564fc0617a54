import { Controller, type INestApplication } from '@nestjs/common';
import {
  Ctx,
  EventPattern,
  type MicroserviceOptions,
  Payload,
  type RmqContext,
  Transport,
} from '@nestjs/microservices';
import amqplib from 'amqplib';
import pg from 'pg';
import {
  IdempotentTransaction,
  IdempotencyStoreUnavailableError,
  IdempotentMessage,
  ProcessedMessages,
  TransientDatabaseError,
} from '../../lib/index.js';
import { type HandlerProgram } from './handler-program.js';

/**
 * The fuzzer's consumer: the same handler programs, delivered by RabbitMQ (`noAck: false`) to
 * an `@IdempotentMessage({ ack: true })` handler, or to a handler that calls
 * `ProcessedMessages.processOnce()` and settles the delivery itself, as a consumer of its own
 * would. Each settlement is printed (`settled <message id> ack|requeue|reject`): the runner
 * reads the broker's side of each delivery from the process's output, which a SIGKILL cannot
 * take back once written (a pipe's writes are synchronous).
 */
export const RABBITMQ_URL = 'amqp://guest:guest@127.0.0.1:5672';
/** The two ways in: the decorator, or `processOnce()` with the app's own settlement. */
export type Via = 'message' | 'once';
export const PATTERNS = { message: 'program', once: 'program.once' } as const;
/** The consumer names the ids are recorded under. */
export const CONSUMERS: Record<Via, string> = { message: 'fuzz', once: 'fuzz-once' };
/** Counted failures before the decorator gives a message up (a program that throws). */
export const MAX_ATTEMPTS = 3;

/**
 * A message's data: the program, and its faults: a statement timeout on its first delivery,
 * and the app's connections terminated this long after the handler began, on the first,
 * second... delivery this process gets of it (the handler runs for milliseconds: timed from
 * the publisher's side, nearly every drop would land between deliveries).
 */
export interface Delivery {
  program: HandlerProgram;
  statementTimeoutMs?: number;
  dropAfterMs?: number[];
}

/** What a program needs of the fuzz app's interpreter. */
export interface ProgramRunner {
  run(program: HandlerProgram, statementTimeoutMs: number): Promise<void>;
}

/** The fault applies to the message's first delivery only: a redelivery runs clean. */
function statementTimeout(delivery: Delivery, context: RmqContext): number {
  const message = context.getMessage() as amqplib.Message;
  return message.fields.redelivered ? 0 : (delivery.statementTimeoutMs ?? 0);
}

/**
 * Terminates the app's connections (by their application name) from a connection of its own,
 * on the n-th delivery this process gets of an id (a message's, a job's) as its data plans.
 */
export function dropperOf(databaseUrl: string, applicationName: string) {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  pool.on('error', () => undefined);
  const deliveries = new Map<string, number>();
  return (delivery: Omit<Delivery, 'program'>, id: string) => {
    const n = deliveries.get(id) ?? 0;
    deliveries.set(id, n + 1);
    const afterMs = delivery.dropAfterMs?.[n];
    if (afterMs === undefined) return Promise.resolve();
    // Outside the delivery's transaction (the handler's context would take it for a
    // statement of the delivery's on another pool).
    const terminate = () =>
      IdempotentTransaction.outside(() =>
        pool.query(
          `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE application_name = $1 AND datname = current_database()`,
          [applicationName],
        ),
      ).then(
        () => undefined,
        () => undefined,
      );
    // At 0, before the program: its first statement meets the delivery's connection gone.
    if (afterMs === 0) return terminate();
    setTimeout(() => void terminate(), afterMs);
    return Promise.resolve();
  };
}

export function consumerOf(
  interpreter: ProgramRunner,
  databaseUrl: string,
  applicationName: string,
) {
  const drop = dropperOf(databaseUrl, applicationName);
  /** One delivery of a program: its faults set off, then the program. */
  const run = async (delivery: Delivery, context: RmqContext) => {
    await drop(delivery, String((context.getMessage() as amqplib.Message).properties.messageId));
    return interpreter.run(delivery.program, statementTimeout(delivery, context));
  };

  @Controller()
  class ProgramConsumer {
    constructor(readonly messages: ProcessedMessages) {}

    @EventPattern<string>('program')
    @IdempotentMessage({ consumer: CONSUMERS.message, ack: true, maxAttempts: MAX_ATTEMPTS })
    async run(@Payload() delivery: Delivery, @Ctx() context: RmqContext) {
      await run(delivery, context);
    }

    /**
     * The webhook recipe on a queue: ack once it ran or was a duplicate, requeue on the errors
     * that say "deliver it again" (after a pause, as the decorator's backoff does), reject
     * anything else: the handler's own failure, final.
     */
    @EventPattern<string>('program.once')
    async once(@Payload() delivery: Delivery, @Ctx() context: RmqContext) {
      const channel = context.getChannelRef() as amqplib.Channel;
      const message = context.getMessage() as amqplib.Message;
      try {
        await this.messages.processOnce(CONSUMERS.once, String(message.properties.messageId), () =>
          run(delivery, context),
        );
        channel.ack(message);
      } catch (error) {
        if (
          error instanceof IdempotencyStoreUnavailableError ||
          error instanceof TransientDatabaseError
        ) {
          await new Promise((resolve) => setTimeout(resolve, 100));
          channel.nack(message, false, true);
        } else {
          channel.nack(message, false, false);
        }
      }
    }
  }
  return ProgramConsumer;
}

/** Prints every settlement any channel of this process sends (amqplib's prototype, reached through a probe). */
export async function printSettlements(): Promise<void> {
  const probe = await amqplib.connect(RABBITMQ_URL);
  const channel = await probe.createChannel();
  const prototype = Object.getPrototypeOf(channel) as {
    ack(message: amqplib.Message, allUpTo?: boolean): void;
    nack(message: amqplib.Message, allUpTo?: boolean, requeue?: boolean): void;
  };
  await probe.close();
  const { ack, nack } = prototype;
  const id = (message: amqplib.Message) => String(message.properties.messageId);
  prototype.ack = function (message, allUpTo) {
    console.log(`settled ${id(message)} ack`);
    return ack.call(this, message, allUpTo);
  };
  prototype.nack = function (message, allUpTo, requeue) {
    console.log(`settled ${id(message)} ${requeue === false ? 'reject' : 'requeue'}`);
    return nack.call(this, message, allUpTo, requeue);
  };
}

/** The RabbitMQ transport on `queue`, as the consumers guide sets it (`noAck: false`). */
export async function startConsumer(app: INestApplication, queue: string): Promise<void> {
  await printSettlements();
  app.connectMicroservice<MicroserviceOptions>({
    transport: Transport.RMQ,
    options: {
      urls: [RABBITMQ_URL],
      queue,
      noAck: false,
      // Duplicates and a crowd's copies run at once.
      prefetchCount: 8,
      queueOptions: { durable: false },
    },
  });
  await app.startAllMicroservices();
}
