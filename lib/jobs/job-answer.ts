import { type StoredResponse } from '../shapes/stored-response.js';

const JSON_TYPE = 'application/json';

/**
 * A job's result as its record keeps it: the JSON BullMQ keeps of it (`returnvalue`), so that
 * what a listener hears (`QueueEvents` 'completed') is the same on the first run and on a
 * replay. `undefined` (a job that returns nothing) is an empty body. Throws what
 * `JSON.stringify` throws (a BigInt, a cycle): such a result cannot be kept.
 */
export function encodeJobResult(result: unknown): StoredResponse {
  const text = result === undefined ? '' : JSON.stringify(result);
  return {
    status: 200,
    headers: { 'content-type': JSON_TYPE },
    body: Buffer.from(text ?? '', 'utf8'),
  };
}

/** What a job returns: its kept result, read back as BullMQ's listeners read it. */
export function decodeJobResult(stored: StoredResponse): unknown {
  const text = stored.body.toString('utf8');
  return text === '' ? undefined : JSON.parse(text);
}

/**
 * Whether the kept answer is a result (else the library's problem, stored as a job's final
 * answer: a result too large to keep).
 */
export function isJobResult(stored: StoredResponse): boolean {
  return stored.status === 200;
}
