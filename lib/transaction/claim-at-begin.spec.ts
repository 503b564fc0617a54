import { claimStatements, notePrepared, recoveryOf, type ClaimInText } from './claim-at-begin.js';

const claim: ClaimInText = {
  name: 'idempotency_claim_v5',
  text: 'SELECT $1::text, $2::text WHERE $1 <> $2',
  args: [`'a$2'::text`, `'b'::text`],
};

describe('claimStatements (the claim in the round trip of the BEGIN)', () => {
  it.each<[string, boolean, boolean, string[]]>([
    [
      'behind a pooler in transaction mode: written whole, its literals in place once each',
      false,
      false,
      [`SELECT 'a$2'::text::text, 'b'::text::text WHERE 'a$2'::text <> 'b'::text`],
    ],
    [
      'a session that has not prepared it: prepared, then executed',
      true,
      false,
      [
        'PREPARE idempotency_claim_v5_in_text AS SELECT $1::text, $2::text WHERE $1 <> $2',
        `EXECUTE idempotency_claim_v5_in_text('a$2'::text, 'b'::text)`,
      ],
    ],
    [
      'a session that has: executed',
      true,
      true,
      [`EXECUTE idempotency_claim_v5_in_text('a$2'::text, 'b'::text)`],
    ],
  ])('%s', (_name, named, prepared, expected) => {
    const connection = {};
    if (prepared) notePrepared(connection, claim);
    expect(claimStatements(connection, claim, named)).toEqual(expected);
  });
});

describe('recoveryOf (what a failed round trip says of the session, and what is sent before again)', () => {
  const failed = (code: string) => Object.assign(new Error(code), { code });
  it.each<[string, boolean, unknown, string | undefined, boolean]>([
    [
      '26000 (the session was reset): rolled back, prepared again',
      true,
      failed('26000'),
      'ROLLBACK',
      false,
    ],
    [
      '42P05 (prepared, not known here): rolled back, executed',
      false,
      failed('42P05'),
      'ROLLBACK',
      true,
    ],
    [
      '0A000 (its plan no longer fits the table): rolled back, dropped, prepared anew',
      true,
      failed('0A000'),
      'ROLLBACK; DEALLOCATE idempotency_claim_v5_in_text',
      false,
    ],
    [
      '0A000 where it was not prepared: the failure is the claim own',
      false,
      failed('0A000'),
      undefined,
      false,
    ],
    ['any other failure: nothing learnt, not sent again', true, failed('40001'), undefined, true],
  ])('%s', (_name, preparedBefore, error, recovery, preparedAfter) => {
    const connection = {};
    if (preparedBefore) notePrepared(connection, claim);
    expect(recoveryOf(connection, claim, error)).toBe(recovery);
    expect(claimStatements(connection, claim, true)).toHaveLength(preparedAfter ? 1 : 2);
  });
});
