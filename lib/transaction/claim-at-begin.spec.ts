import { claimStatements, notePrepared, type ClaimInText } from './claim-at-begin.js';

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

describe('notePrepared (what a round trip says of the session)', () => {
  const failed = (code: string) => Object.assign(new Error(code), { code });
  it.each<[string, boolean, unknown, boolean, boolean]>([
    ['sent: prepared now', false, undefined, false, true],
    [
      '26000 (the session was reset): to prepare again, sent again',
      true,
      failed('26000'),
      true,
      false,
    ],
    ['42P05 (prepared, not known here): known, sent again', false, failed('42P05'), true, true],
    ['any other failure: nothing learnt, not sent again', true, failed('40001'), false, true],
  ])('%s', (_name, preparedBefore, error, again, preparedAfter) => {
    const connection = {};
    if (preparedBefore) notePrepared(connection, claim);
    expect(notePrepared(connection, claim, error)).toBe(again);
    expect(claimStatements(connection, claim, true)).toHaveLength(preparedAfter ? 1 : 2);
  });
});
