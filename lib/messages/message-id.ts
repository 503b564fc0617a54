/**
 * The id a transport gives a message, read from the context Nest hands a message handler,
 * without importing `@nestjs/microservices` (an optional peer): RabbitMQ's AMQP `message-id`
 * property, or NATS's `Nats-Msg-Id` header (JetStream's own de-duplication id) or an
 * `Idempotency-Key` header. Other transports, and publishers that set none, need the
 * decorator's `messageId` option.
 */
export function transportMessageId(context: unknown): string | undefined {
  const rmq = context as { getMessage?: () => { properties?: { messageId?: unknown } } };
  const nats = context as { getHeaders?: () => { get?: (name: string) => string } | undefined };
  if (typeof rmq.getMessage === 'function') {
    const id = rmq.getMessage()?.properties?.messageId;
    return typeof id === 'string' && id !== '' ? id : undefined;
  }
  if (typeof nats.getHeaders === 'function') {
    const headers = nats.getHeaders();
    if (typeof headers?.get !== 'function') return undefined;
    return headers.get('Nats-Msg-Id') || headers.get('Idempotency-Key') || undefined;
  }
  return undefined;
}

/**
 * A message id as the processed table keeps it: 1 to 255 characters; a number is taken as
 * written. Anything else is not an id, and undefined is returned.
 */
export function normalizeMessageId(value: unknown): string | undefined {
  const id = typeof value === 'number' && Number.isSafeInteger(value) ? String(value) : value;
  return typeof id === 'string' && id.length >= 1 && id.length <= 255 ? id : undefined;
}

/** What to do with a delivery that failed. */
export type FailedDelivery = 'redeliver' | 'give-up';

/**
 * After a failure: deliver again, or give the message up once it failed `maxAttempts` times
 * (a poison message: redelivering it for ever would stall its queue). A failure the database
 * caused for a passing reason counts nothing (`attempts` undefined: it could not be counted)
 * and is always delivered again.
 */
export function afterFailure(attempts: number | undefined, maxAttempts: number): FailedDelivery {
  return attempts !== undefined && attempts >= maxAttempts ? 'give-up' : 'redeliver';
}
