import { firstCharacters, isWellFormedText, longerThan } from '../decisions/well-formed.js';

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

/** What a message's id is, as the processed table would keep it. */
export type MessageIdReading =
  | { kind: 'id'; id: string }
  /** No id at all (absent, null, empty). */
  | { kind: 'none' }
  /** An id PostgreSQL cannot keep as given; `reason` completes "it ...". */
  | { kind: 'unusable'; reason: string };

/**
 * A message id as the processed table keeps it: 1 to 255 characters (code points, as
 * PostgreSQL's `length()` counts them); a number is taken as
 * written. An id that PostgreSQL cannot store as given is unusable rather than altered: a NUL
 * character fails every statement that carries it (and its failures could not be counted
 * either, so it was redelivered for ever), and a lone surrogate would be stored as U+FFFD,
 * where two different ids become one and the second message is taken for a duplicate.
 */
export function readMessageId(value: unknown): MessageIdReading {
  if (value === undefined || value === null || value === '') return { kind: 'none' };
  if (typeof value === 'number') {
    return Number.isSafeInteger(value)
      ? { kind: 'id', id: String(value) }
      : { kind: 'unusable', reason: 'is a number but not a safe integer' };
  }
  if (typeof value !== 'string') {
    return { kind: 'unusable', reason: `is a ${typeof value}, not a string or an integer` };
  }
  // Characters as the table's CHECK counts them (code points), not UTF-16 code units.
  if (longerThan(value, 255)) return { kind: 'unusable', reason: 'is over 255 characters' };
  if (value.includes('\u0000')) return { kind: 'unusable', reason: 'holds a NUL character' };
  if (!isWellFormedText(value)) {
    return { kind: 'unusable', reason: 'holds a lone surrogate (not Unicode)' };
  }
  return { kind: 'id', id: value };
}

/** An id as a log line or an error message may show it: quoted, escaped, at most 60 characters. */
export function previewMessageId(value: unknown): string {
  let shown: string;
  try {
    shown = JSON.stringify(value) ?? String(value);
  } catch {
    shown = String(value);
  }
  return longerThan(shown, 60) ? `${firstCharacters(shown, 60)}…` : shown;
}
