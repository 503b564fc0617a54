import { Inject, Injectable } from '@nestjs/common';
import { type QueryResult } from 'pg';
import { type EntityManager } from 'typeorm';
import { IdempotencyDatabase } from './data-layers/idempotency-database.js';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from './idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from './shapes/idempotency-options.interface.js';
import { publish } from './events/idempotency-events.js';
import { classifyCommitError, classifyHandlerError } from './transaction/failure.js';
import { TransactionAbortedError } from './transaction/seam-errors.js';
import { readMessageId } from './messages/message-id.js';
import { longerThan } from './decisions/well-formed.js';
import { markDatabaseFailure } from './connection/connection-errors.js';

/** The outcome of delivering a message: it ran now, or it had been processed before. */
export type DeliveryOutcome<T> = { duplicate: false; result: T } | { duplicate: true };

const RECORD = `INSERT INTO processed_messages (consumer, message_id) VALUES ($1, $2)
ON CONFLICT (consumer, message_id) DO NOTHING`;

/**
 * Exactly-once effects for at-least-once consumers (webhooks, RabbitMQ, NATS, Kafka):
 * the message id is recorded in the same transaction as the side effect, so the effect
 * commits once per id however often the message is delivered.
 *
 * Two deliveries of one id at the same moment are serialized by PostgreSQL: the second
 * insert waits on the first's uncommitted row, then finds it committed (a duplicate) or,
 * if the first rolled back, records the id and runs the effect itself. An effect that
 * throws rolls the record back too, so the message can be delivered again.
 *
 * @example
 * const outcome = await this.messages.processOnce('psp-webhooks', event.id, (manager) =>
 *   manager.insert(Refund, { chargeId: event.charge, amount: event.amount }),
 * );
 * return { duplicate: outcome.duplicate }; // ack either way
 */
@Injectable()
export class ProcessedMessages {
  constructor(
    private readonly database: IdempotencyDatabase,
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
  ) {}

  /**
   * Applies `effect` once per `messageId`. A database that cannot be reached, or that rolls
   * the delivery back for a passing reason, throws `IdempotencyStoreUnavailableError` or
   * `TransientDatabaseError`: nothing was recorded, and the message must be delivered again
   * (`IdempotencyErrorFilter` answers both with 503 and `Retry-After`).
   */
  async processOnce<T>(
    consumer: string,
    messageId: string,
    effect: (manager: EntityManager) => Promise<T>,
  ): Promise<DeliveryOutcome<T>> {
    // Characters as the table's CHECK counts them (code points), not UTF-16 code units.
    if (!consumer || longerThan(consumer, 255)) {
      throw new RangeError('consumer: 1 to 255 characters');
    }
    if (!messageId || longerThan(messageId, 255)) {
      throw new RangeError('messageId: 1 to 255 characters');
    }
    // Refused rather than sent: PostgreSQL cannot store a NUL, and would store a lone surrogate
    // as U+FFFD, where two ids become one and the second message is taken for a duplicate.
    for (const [name, value] of [
      ['consumer', consumer],
      ['messageId', messageId],
    ] as const) {
      const reading = readMessageId(value);
      if (reading.kind === 'unusable') {
        throw new RangeError(`${name} cannot be stored: it ${reading.reason}`);
      }
    }
    let effectError: unknown;
    try {
      return await this.database.runInTransaction(async (manager) => {
        // On a node-postgres pool, the pool's query joins the transaction (and `manager` is a
        // stand-in: the effect writes with the app's own client on that pool).
        const recorded = this.options.pool
          ? ((await this.options.pool.query(RECORD, [consumer, messageId])) as QueryResult).rowCount
          : (await manager.queryRunner!.query(RECORD, [consumer, messageId], true)).affected;
        if (recorded !== 1) {
          publish('consumerDuplicate', () => ({ consumer, messageId }));
          return { duplicate: true };
        }
        try {
          return { duplicate: false, result: await effect(manager) };
        } catch (error) {
          effectError = error;
          throw error;
        }
      });
    } catch (error) {
      // A passing failure of the database (unreachable, a deadline, a deadlock) becomes the
      // error that says "deliver it again", as on the HTTP path: nothing was recorded. What
      // failed outside the effect (the connection, BEGIN, the record, COMMIT) is the
      // database's (TypeORM hands a refused connection on as the socket's error). The effect's
      // failures are told apart as a handler's are: its statements' errors, however its data
      // layer wraps them, are the database's; a call to another system failing is its own.
      const failure = classifyHandlerError(
        error === effectError ? error : markDatabaseFailure(error),
      );
      if (failure.kind === 'retry') throw failure.error;
      // Its COMMIT found the transaction aborted by a statement the effect caught: nothing
      // committed, the id not recorded; said as a route says it (500 transaction_aborted).
      if (error instanceof TransactionAbortedError) throw classifyCommitError(error);
      throw error;
    }
  }
}
