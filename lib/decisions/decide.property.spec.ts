import fc from 'fast-check';
import { decide, type ExistingKey } from './decide.js';

const fingerprint = fc.constantFrom(Buffer.alloc(32, 1), Buffer.alloc(32, 2));
const response = { status: 201, headers: {}, body: Buffer.from('{}') };
const existing: fc.Arbitrary<ExistingKey> = fc.oneof(
  fc.record({
    state: fc.constant('started' as const),
    fingerprint,
    leaseExpired: fc.boolean(),
    leaseSecondsLeft: fc.integer({ min: -5, max: 120 }),
    fence: fc.record({ lockVersion: fc.constant('0'), claimId: fc.uuid() }),
  }),
  fc.record({ state: fc.constant('done' as const), fingerprint, response: fc.constant(response) }),
);

/** The design's decision table, written as plainly as it reads. */
function reference(row: ExistingKey, fp: Buffer): string {
  if (Buffer.compare(row.fingerprint, fp) !== 0) return 'mismatch';
  if (row.state === 'done') return 'replay';
  return row.leaseExpired ? 'take-over' : 'in-progress';
}

describe('decide, against the design’s table', () => {
  it('agrees with the reference on every row and fingerprint', () => {
    fc.assert(
      fc.property(existing, fingerprint, (row, fp) => {
        const decision = decide(row, fp);
        expect(decision.kind).toBe(reference(row, fp));
        if (decision.kind === 'in-progress') {
          expect(decision.retryAfterSeconds).toBeGreaterThanOrEqual(1);
        }
      }),
    );
  });
});
