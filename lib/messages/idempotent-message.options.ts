import { readMessageId } from './message-id.js';

/** Options of `@IdempotentMessage()`. */
export interface IdempotentMessageOptions {
  /**
   * The consumer's name: message ids are unique per consumer, as two queues may reuse ids.
   * @default 'Class.method' of the handler
   */
  consumer?: string;
  /**
   * Reads the message's id from its payload and the transport's context, for publishers that
   * put it there. A string of 1 to 255 characters, or an integer.
   * @default the transport's id: RabbitMQ's `message-id` property, NATS's `Nats-Msg-Id` (or
   * `Idempotency-Key`) header
   */
  messageId?: (data: unknown, context: unknown) => unknown;
  /**
   * Deliveries that may fail before the message is given up (rejected without requeue, to the
   * queue's dead-letter exchange if it has one). Failures the database caused for a passing
   * reason (unreachable, a deadlock) do not count.
   * @default 5
   */
  maxAttempts?: number;
  /**
   * RabbitMQ with `noAck: false`: the library acknowledges each delivery after its transaction
   * commits, requeues it after a failure, and rejects it once given up. A RabbitMQ transport
   * with `noAck: true` (Nest's default) acknowledges every delivery as it is sent: `ack: true`
   * there is refused at start-up. On transports without acknowledgements (core NATS, TCP,
   * Redis) it does nothing. Leave it off when the consumer acknowledges on its own.
   * @default false
   */
  ack?: boolean;
}

export interface ResolvedMessageOptions {
  consumer: string;
  messageId?: (data: unknown, context: unknown) => unknown;
  maxAttempts: number;
  ack: boolean;
}

/** Fills in the defaults; throws a message naming the option when one is wrong. */
export function resolveMessageOptions(
  options: IdempotentMessageOptions,
  handlerName: string,
): ResolvedMessageOptions {
  const consumer = options.consumer ?? handlerName;
  if (typeof consumer !== 'string' || consumer.length < 1 || consumer.length > 255) {
    throw new Error('@IdempotentMessage(): consumer must be 1 to 255 characters');
  }
  // Stored with every message id: a name PostgreSQL cannot store would fail every delivery.
  const reading = readMessageId(consumer);
  if (reading.kind === 'unusable') {
    throw new Error(`@IdempotentMessage(): consumer cannot be stored: it ${reading.reason}`);
  }
  const maxAttempts = options.maxAttempts ?? 5;
  if (!Number.isSafeInteger(maxAttempts) || maxAttempts < 1) {
    throw new Error(
      `@IdempotentMessage(): maxAttempts must be a positive integer, got ${maxAttempts}`,
    );
  }
  if (options.messageId !== undefined && typeof options.messageId !== 'function') {
    throw new Error('@IdempotentMessage(): messageId must be a function (data, context) => id');
  }
  return { consumer, messageId: options.messageId, maxAttempts, ack: options.ack ?? false };
}
