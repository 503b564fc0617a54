import {
  type CallHandler,
  type ExecutionContext,
  Injectable,
  Logger,
  type NestInterceptor,
} from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { from, lastValueFrom, Observable } from 'rxjs';
import { publish } from '../events/idempotency-events.js';
import { IDEMPOTENT_MESSAGE_OPTIONS } from '../shapes/idempotency.constants.js';
import { classifyHandlerError, isPassing } from '../transaction/failure.js';
import { IdempotencyDatabase } from '../data-layers/idempotency-database.js';
import { inMessagesSchema, RECORD_MESSAGE, TOUCH_MESSAGE } from '../claim/postgres-statements.js';
import { TransactionAbortedError } from '../data-layers/lazy-transaction.js';
import { handleInTransaction } from '../transaction/handle-in-transaction.js';
import { afterFailure, raisedError } from './failed-delivery.js';
import { FailureTally } from './failure-tally.js';
import { type MessageAck, messageAck } from './message-ack.js';
import { previewMessageId, readMessageId, transportMessageId } from './message-id.js';
import { storableText } from './storable-text.js';
import {
  type IdempotentMessageOptions,
  type ResolvedMessageOptions,
  resolveMessageOptions,
} from './idempotent-message.options.js';

/** A message whose id could not be read: it cannot be told apart from its redeliveries. */
export class MessageIdMissingError extends Error {
  constructor(consumer: string) {
    super(
      `@IdempotentMessage() on ${consumer}: the message has no id. Set one when publishing ` +
        '(the AMQP message-id property, a NATS Nats-Msg-Id header) or give messageId: ' +
        '(data, context) => id',
    );
    this.name = 'MessageIdMissingError';
  }
}

/**
 * A message whose id PostgreSQL cannot store as given (a NUL character, a lone surrogate, over
 * 255 characters): it cannot be recorded, so it is never applied, and never redelivered.
 */
export class MessageIdUnusableError extends Error {
  constructor(consumer: string, id: unknown, reason: string) {
    super(
      `@IdempotentMessage() on ${consumer}: the message id ${previewMessageId(id)} cannot be ` +
        `stored: it ${reason}. The message was rejected (to the queue's dead letters, if it ` +
        'has them) rather than applied unguarded. Publish ids of 1 to 255 characters without ' +
        'NUL, or give messageId: (data, context) => id',
    );
    this.name = 'MessageIdUnusableError';
  }
}

/**
 * The message side of the library: a delivery runs in one transaction that starts by
 * recording its id and ends with the handler's effects, so it is applied once per id. A
 * duplicate is answered with nothing (an `@EventPattern` has no answer; a `@MessagePattern`
 * requester gets none for a duplicate), and the broker is told it is done.
 */
@Injectable()
export class IdempotentMessageInterceptor implements NestInterceptor {
  private readonly logger = new Logger('Idempotency');
  private readonly handlers = new WeakMap<object, ResolvedMessageOptions>();
  private readonly tally = new FailureTally();

  constructor(
    private readonly reflector: Reflector,
    private readonly database: IdempotencyDatabase,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const options = this.optionsOf(context);
    const rpc = context.switchToRpc();
    const transport = rpc.getContext<unknown>();
    const ack = messageAck(transport, options.ack);
    let value: unknown;
    try {
      value = options.messageId
        ? options.messageId(rpc.getData(), transport)
        : transportMessageId(transport);
    } catch (error) {
      // The app's own reader failed on this message: it is settled, never left unacknowledged.
      ack.reject();
      throw error;
    }
    const reading = readMessageId(value);
    if (reading.kind !== 'id') {
      // Never applied without an id it can record: it could not be told from its redeliveries.
      ack.reject();
      throw reading.kind === 'none'
        ? new MessageIdMissingError(options.consumer)
        : new MessageIdUnusableError(options.consumer, value, reading.reason);
    }
    const id = reading.id;
    return from(this.deliver(options, id, next, ack));
  }

  private async deliver(
    options: ResolvedMessageOptions,
    messageId: string,
    next: CallHandler,
    ack: MessageAck,
  ): Promise<unknown> {
    const { consumer } = options;
    const transaction = this.database.transaction(true);
    try {
      // The schema check, when the database was down at start-up: a missing table is said once
      // here, as a permanent error that counts towards giving the message up.
      await this.database.ready();
      // The record opens the transaction on the session's search path (the handler's keep
      // it); the record and its touch at commit name their table in its schema instead.
      transaction.keepSessionPathForOwnStatements();
      // Named in the schema the library's path resolves it to, whatever the session's path.
      const schema = this.database.messagesSchema();
      const record = inMessagesSchema(RECORD_MESSAGE, schema);
      const touch = inMessagesSchema(TOUCH_MESSAGE, schema);
      const recorded = await transaction.query(record.text, [consumer, messageId]);
      if (recorded.length === 0) {
        await transaction.rollback();
        this.tally.forget(consumer, messageId);
        ack.ack();
        publish('consumerDuplicate', () => ({ consumer, messageId }));
        return undefined;
      }
      const result = await lastValueFrom(
        new Observable<unknown>((subscriber) => handleInTransaction(transaction, next, subscriber)),
        { defaultValue: undefined },
      );
      const committed = await transaction.commitWith({
        name: touch.name,
        text: touch.text,
        values: [consumer, messageId],
      });
      // Its own row, locked since the insert, cannot be missing; if it were, nothing committed.
      if (!committed) throw new Error(`the record of message ${messageId} was not found at commit`);
      this.tally.forget(consumer, messageId);
      ack.ack();
      return result;
    } catch (error) {
      await transaction.rollback();
      throw await this.failed(options, messageId, ack, transaction.failureOf(error));
    }
  }

  /** Counts a failed delivery and settles it with the broker; returns the error to raise. */
  private async failed(
    options: ResolvedMessageOptions,
    messageId: string,
    ack: MessageAck,
    error: unknown,
  ): Promise<unknown> {
    // The database's passing failures (unreachable, a deadline, a deadlock, also when the
    // handler caught it and the commit then found the transaction aborted) count nothing.
    const cause = error instanceof TransactionAbortedError ? error.cause : error;
    const failure = classifyHandlerError(cause);
    const passing = isPassing(failure);
    let counted: number | undefined;
    if (!passing) {
      counted = await this.database
        .recordMessageFailure(options.consumer, messageId, storableText(String(error)))
        .catch((countError: unknown) => {
          this.logger.warn(
            `a failed delivery of ${messageId} was not counted (this process counts it): ` +
              String(countError),
          );
          return undefined;
        });
    }
    const { seen, failures } = this.tally.add(options.consumer, messageId, !passing);
    const next = afterFailure({ passing, counted, seen, failures }, options.maxAttempts);
    if (next.action === 'give-up') {
      this.tally.forget(options.consumer, messageId);
      ack.reject();
      this.logger.error(
        `${options.consumer} gave up message ${messageId} after ${next.attempts} failed deliveries: ${String(error)}`,
      );
      publish('consumerGaveUp', () => ({
        consumer: options.consumer,
        messageId,
        attempts: next.attempts,
      }));
    } else {
      // Held back before it goes back to the broker: redelivered at once, a failure that
      // could not be counted looped hundreds of times a second.
      if (next.delayMs > 0 && ack.settles) await sleep(next.delayMs);
      ack.redeliver();
    }
    return raisedError(failure, error);
  }

  private optionsOf(context: ExecutionContext): ResolvedMessageOptions {
    const handler = context.getHandler();
    let options = this.handlers.get(handler);
    if (!options) {
      const own = this.reflector.get<IdempotentMessageOptions | undefined>(
        IDEMPOTENT_MESSAGE_OPTIONS,
        handler,
      );
      options = resolveMessageOptions(own ?? {}, `${context.getClass().name}.${handler.name}`);
      this.handlers.set(handler, options);
    }
    return options;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
