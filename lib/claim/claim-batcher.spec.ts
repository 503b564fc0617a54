import { IdempotencyStoreUnavailableError } from '../shapes/idempotency.errors.js';
import {
  ClaimBatcher,
  type ClaimRequest,
  MAX_CLAIM_BATCH,
  isRolledBack,
  mayBeOneRows,
  takeBatch,
} from './claim-batcher.js';

const waiting = (tenantId: string, key: string) => ({
  request: { scope: { tenantId, key }, fingerprint: Buffer.alloc(0), leaseMs: 1 },
});
const ids = (list: ReturnType<typeof waiting>[]) =>
  list.map((w) => `${w.request.scope.tenantId}/${w.request.scope.key}`);

describe('takeBatch', () => {
  it.each([
    ['all of a short queue, sorted', ['1/b', '1/a', '2/a'], 10, ['1/a', '1/b', '2/a'], []],
    [
      'up to the most, in their order of arrival',
      ['1/c', '1/b', '1/a'],
      2,
      ['1/b', '1/c'],
      ['1/a'],
    ],
    [
      'a key once, its second claim left for the next',
      ['1/a', '1/b', '1/a'],
      10,
      ['1/a', '1/b'],
      ['1/a'],
    ],
    ['the same key of two tenants apart', ['1/a', '2/a'], 10, ['1/a', '2/a'], []],
    [
      'tenant "ab" with key "c" apart from "a" with "bc"',
      ['ab/c', 'a/bc'],
      10,
      ['a/bc', 'ab/c'],
      [],
    ],
  ])('takes %s', (_, queued, max, batch, left) => {
    const queue = queued.map((id) => waiting(...(id.split('/') as [string, string])));
    expect(ids(takeBatch(queue, max))).toEqual(batch);
    expect(ids(queue)).toEqual(left);
  });
});

describe('mayBeOneRows', () => {
  const unavailable = (code?: string) => new IdempotencyStoreUnavailableError({ code });
  it.each([
    ['a check violation', unavailable('23514'), true],
    ['a value out of range', unavailable('22003'), true],
    ['a deadlock', unavailable('40P01'), true],
    ['a cancelled statement (the deadline)', unavailable('57014'), false],
    ['a lost connection', unavailable('08006'), false],
    ['a missing table', unavailable('42P01'), false],
    ['an error without a SQLSTATE', unavailable(), false],
  ])('%s: %s', (_, error, expected) => {
    expect(mayBeOneRows(error)).toBe(expected);
  });
});

describe('isRolledBack: a claim run again', () => {
  const unavailable = (code?: string) => new IdempotencyStoreUnavailableError({ code });
  it.each([
    ['a serialization failure (a SERIALIZABLE default)', unavailable('40001'), true],
    ['a deadlock', unavailable('40P01'), true],
    ['the bare error', { code: '40001' }, true],
    ['a check violation', unavailable('23514'), false],
    ['a cancelled statement (the deadline)', unavailable('57014'), false],
    ['a lost connection', unavailable('08006'), false],
    ['an error without a SQLSTATE', unavailable(), false],
  ])('%s: %s', (_, error, expected) => {
    expect(isRolledBack(error)).toBe(expected);
  });
});

describe('ClaimBatcher deadlines', () => {
  const request = (key: string): ClaimRequest => ({
    scope: { tenantId: '1', key },
    fingerprint: Buffer.alloc(0),
    leaseMs: 1,
  });
  /** A statement the test answers by hand; each call's claims, in order. */
  function hanging() {
    const calls: { keys: string[]; answer: (rows: string[]) => void }[] = [];
    const send = (batch: ClaimRequest[]) =>
      new Promise<string[]>((answer) =>
        calls.push({ keys: batch.map((claim) => claim.scope.key), answer }),
      );
    return { calls, send };
  }
  const gone = () => new Error('past its deadline');

  it('answers a claim queued behind a batch at its own deadline, and never sends it', async () => {
    const { calls, send } = hanging();
    const batcher = new ClaimBatcher<string>(send);
    const first = batcher.claim(request('a'));
    const queued = batcher.claim(request('b'), { at: Date.now() + 20, error: gone });
    await expect(queued).rejects.toThrow('past its deadline');
    expect(batcher.waiting).toBe(0);
    calls[0].answer(['row a']);
    await expect(first).resolves.toBe('row a');
    expect(calls.map((call) => call.keys)).toEqual([['a']]);
  });

  it('answers a claim whose statement is on its way at its deadline, and hands its row on', async () => {
    const { calls, send } = hanging();
    const late: string[] = [];
    const batcher = new ClaimBatcher<string>(send, MAX_CLAIM_BATCH, (claim, row) =>
      late.push(`${claim.scope.key}: ${row}`),
    );
    const sent = batcher.claim(request('a'), { at: Date.now() + 20, error: gone });
    await expect(sent).rejects.toThrow('past its deadline');
    calls[0].answer(['row a']);
    await new Promise((resolve) => setImmediate(resolve));
    expect(late).toEqual(['a: row a']);
  });

  it('keeps a key settling from a claim answered at its deadline until its statement ends, and its row was handed on', async () => {
    const { calls, send } = hanging();
    const late: string[] = [];
    const batcher = new ClaimBatcher<string>(send, MAX_CLAIM_BATCH, (claim, row) =>
      late.push(`${claim.scope.key}: ${row}`),
    );
    expect(batcher.settling(request('a').scope)).toBeUndefined();
    const sent = batcher.claim(request('a'), { at: Date.now() + 20, error: gone });
    await expect(sent).rejects.toThrow('past its deadline');
    const settling = batcher.settling(request('a').scope);
    expect(settling).toBeDefined();
    expect(batcher.settling(request('b').scope)).toBeUndefined();
    let settled = false;
    void settling!.then(() => (settled = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toBe(false);
    calls[0].answer(['row a']);
    await settling;
    expect(late).toEqual(['a: row a']);
    expect(batcher.settling(request('a').scope)).toBeUndefined();
  });

  it('hands every row of a statement that answers after its own deadline to late, in its claim’s place', async () => {
    // The statement failed with its deadline (its claims with it), and its rows came after:
    // its claims were committed, and nobody will run them.
    const late: string[] = [];
    const statementDeadline = new Error('statement past its deadline');
    const calls: ((rows: (string | undefined)[]) => void)[] = [];
    const send = (_batch: ClaimRequest[], lateRows: (rows: (string | undefined)[]) => void) => {
      calls.push(lateRows);
      return calls.length === 1
        ? Promise.resolve(['row first'])
        : Promise.reject(statementDeadline);
    };
    const batcher = new ClaimBatcher<string | undefined>(send, MAX_CLAIM_BATCH, (claim, row) =>
      late.push(`${claim.scope.key}: ${row}`),
    );
    const first = batcher.claim(request('first'));
    const batch = [request('b'), request('a'), request('c')].map((claim) =>
      batcher.claim(claim).catch((error: unknown) => error),
    );
    await expect(first).resolves.toBe('row first');
    expect(await Promise.all(batch)).toEqual([
      statementDeadline,
      statementDeadline,
      statementDeadline,
    ]);
    calls[1](['row a', undefined, 'row c']); // the batch went sorted: a, b, c
    expect(late).toEqual(['a: row a', 'b: undefined', 'c: row c']);
  });

  it('answers a claim in time as before, its deadline never met', async () => {
    const { calls, send } = hanging();
    const late: string[] = [];
    const batcher = new ClaimBatcher<string>(send, MAX_CLAIM_BATCH, (_, row) => late.push(row));
    const claim = batcher.claim(request('a'), { at: Date.now() + 50, error: gone });
    calls[0].answer(['row a']);
    await expect(claim).resolves.toBe('row a');
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(late).toEqual([]);
  });
});
