import { type ClaimRequest } from './claim-batcher.js';
import { type ClaimRow, lateClaim } from './postgres-claim.store.js';

describe('lateClaim', () => {
  const request: ClaimRequest = {
    scope: { tenantId: 't', key: 'k' },
    fingerprint: Buffer.alloc(0),
    leaseMs: 60_000,
  };
  const row = (fields: Partial<ClaimRow>): ClaimRow => ({
    claimed: false,
    claim_id: 'c-1',
    lock_version: '0',
    fingerprint: null,
    state: null,
    lease_expired: null,
    lease_seconds_left: null,
    response_code: null,
    response_body: null,
    response_headers: null,
    finished_age_ms: null,
    ...fields,
  });

  it.each<[string, ClaimRow | undefined, { claimId: string; lockVersion: string } | undefined]>([
    [
      'a key this claim inserted: given back by its own fence',
      row({ claimed: true }),
      { claimId: 'c-1', lockVersion: '0' },
    ],
    [
      'a key held by another request (a retry claimed it first): left alone',
      row({ claimed: false, claim_id: 'c-2', state: 'started', lease_seconds_left: 59 }),
      undefined,
    ],
    [
      'a key another request finished: left alone',
      row({ claimed: false, claim_id: 'c-3', state: 'done', response_code: 201 }),
      undefined,
    ],
    [
      'a key whose lease another request took over: left alone',
      row({ claimed: false, claim_id: 'c-4', lock_version: '1', state: 'started' }),
      undefined,
    ],
    ['no row (a conflict committed after the snapshot): nothing', undefined, undefined],
  ])('%s', (_name, found, expected) => {
    const claim = lateClaim(request, found);
    expect(claim && { claimId: claim.claimId, lockVersion: claim.lockVersion }).toEqual(expected);
    if (claim) expect(claim).toMatchObject({ tenantId: 't', key: 'k', leaseMs: 60_000 });
  });
});
