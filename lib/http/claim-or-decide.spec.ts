import { type ExistingKey } from '../decisions/decide.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type FoundKey, onFoundKey } from './claim-or-decide.js';

const mine = Buffer.alloc(32, 1);
const other = Buffer.alloc(32, 2);
const fence = { lockVersion: '3', claimId: 'c0ffee00-0000-4000-8000-000000000000' };
const response: StoredResponse = {
  status: 201,
  headers: { 'content-type': 'application/json' },
  body: Buffer.from('{"id":1}'),
};
const started = (
  leaseExpired: boolean,
  leaseSecondsLeft: number,
  released?: true,
): ExistingKey => ({
  state: 'started',
  fingerprint: mine,
  leaseExpired,
  leaseSecondsLeft,
  fence,
  ...(released ? { released } : {}),
});

/** The outcome with each refusal by its event, code, message and Retry-After. */
function shape(found: FoundKey) {
  if (found.kind !== 'refuse') return found;
  const { error } = found;
  return {
    kind: found.kind,
    event: found.event,
    code: error.code,
    message: error.message,
    retryAfter: 'retryAfterSeconds' in error ? error.retryAfterSeconds : undefined,
  };
}

describe('onFoundKey (what a key found taken means for the request)', () => {
  it.each<[string, ExistingKey, Buffer, ReturnType<typeof shape>]>([
    [
      'finished, same request: replayed, remembered for what is left of its retention',
      { state: 'done', fingerprint: mine, response, finishedAgeMs: 1500 },
      mine,
      { kind: 'replay', response, finishedAgeMs: 1500 },
    ],
    [
      'finished at an unknown time: replayed, its age infinite',
      { state: 'done', fingerprint: mine, response },
      mine,
      { kind: 'replay', response, finishedAgeMs: Infinity },
    ],
    [
      'finished, another request',
      { state: 'done', fingerprint: other, response },
      mine,
      {
        kind: 'refuse',
        event: 'mismatch',
        code: 'key_mismatch',
        message: expect.any(String) as string,
        retryAfter: undefined,
      },
    ],
    [
      'started, another request',
      { ...started(false, 4), fingerprint: other },
      mine,
      {
        kind: 'refuse',
        event: 'mismatch',
        code: 'key_mismatch',
        message: expect.any(String) as string,
        retryAfter: undefined,
      },
    ],
    [
      'started, its lease held for 4 s more: come back in a second (conflictRetryAfterSeconds)',
      started(false, 4),
      mine,
      {
        kind: 'refuse',
        event: 'conflict',
        code: 'key_in_progress',
        message: expect.any(String) as string,
        retryAfter: 1,
      },
    ],
    [
      'started, its lease expired: taken over',
      started(true, 0),
      mine,
      { kind: 'take-over', fence, resumes: false },
    ],
    [
      'started, given back without an answer: resumed',
      started(true, 0, true),
      mine,
      { kind: 'take-over', fence, resumes: true },
    ],
  ])('%s', (_name, existing, fingerprint, expected) => {
    expect(shape(onFoundKey(existing, fingerprint))).toEqual(expected);
  });
});
