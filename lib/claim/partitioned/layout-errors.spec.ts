import { explainLayoutError, isNoPartitionError } from './layout-errors.js';

describe('explainLayoutError', () => {
  it.each<[string, unknown, string | undefined]>([
    [
      'the plain CLAIM on a partitioned table, or on a table without its primary key',
      {
        code: '42P10',
        message:
          'there is no unique or exclusion constraint matching the ON CONFLICT specification',
      },
      "idempotency_keys has no primary key or unique index on (tenant_id, key), which the claim's " +
        'ON CONFLICT needs: if the PartitionIdempotencyKeys migration ran, turn partitionedExpiry ' +
        'on in IdempotencyModule.forRoot() (or revert that migration); otherwise restore the ' +
        'primary key (ALTER TABLE idempotency_keys ADD PRIMARY KEY (tenant_id, key))',
    ],
    [
      'the partitioned claim before the migration',
      {
        code: '42883',
        message: 'function idempotency_claim(unknown, unknown, unknown, unknown) does not exist',
      },
      'partitionedExpiry is on, but idempotency_keys is not partitioned: run the ' +
        'PartitionIdempotencyKeys1764461600000 migration (see the README\'s "Partitioned expiry")',
    ],
    [
      'partitions made before the migration',
      { code: '42883', message: 'function idempotency_keys_create_partitions(integer, integer)' },
      'partitionedExpiry is on, but idempotency_keys is not partitioned: run the ' +
        'PartitionIdempotencyKeys1764461600000 migration (see the README\'s "Partitioned expiry")',
    ],
    [
      'the claim under REPEATABLE READ, with its hint',
      {
        code: '55000',
        message: 'idempotency_claim needs READ COMMITTED isolation, not REPEATABLE READ',
        hint: "Set default_transaction_isolation back to 'read committed'.",
      },
      'idempotency_claim needs READ COMMITTED isolation, not REPEATABLE READ. ' +
        "Set default_transaction_isolation back to 'read committed'.",
    ],
    [
      'another missing function',
      { code: '42883', message: 'function f() does not exist' },
      undefined,
    ],
    ['another 55000', { code: '55000', message: 'object not in prerequisite state' }, undefined],
    ['a connection refused', { code: 'ECONNREFUSED', message: 'connect ECONNREFUSED' }, undefined],
    ['nothing', undefined, undefined],
  ])('%s', (_name, error, expected) => {
    expect(explainLayoutError(error)).toBe(expected);
  });
});

describe('isNoPartitionError', () => {
  it.each<[unknown, boolean]>([
    [
      {
        code: '23514',
        table: 'idempotency_keys',
        message: 'no partition of relation "idempotency_keys" found for row',
      },
      true,
    ],
    // The same under lc_messages = 'de_DE': the fields decide, not the words.
    [
      {
        code: '23514',
        table: 'idempotency_keys',
        message: 'keine Partition von Relation »idempotency_keys« für die Zeile gefunden',
      },
      true,
    ],
    [
      {
        code: '23514',
        table: 'idempotency_keys',
        constraint: 'idempotency_keys_key_check',
        message: 'new row violates check constraint "idempotency_keys_key_check"',
      },
      false,
    ],
    // A row put straight into a partition outside its range: about that partition.
    [
      {
        code: '23514',
        table: 'idempotency_keys_20261207t000000000',
        message:
          'new row for relation "idempotency_keys_20261207t000000000" violates partition constraint',
      },
      false,
    ],
    [{ code: '23514', table: 'orders', message: 'no partition of relation "orders"' }, false],
    [{ code: '23505', table: 'idempotency_keys', message: 'no partition' }, false],
    [
      { code: '23514', message: 'no partition of relation "idempotency_keys" found for row' },
      false,
    ],
    [null, false],
  ])('%j: %s', (error, expected) => {
    expect(isNoPartitionError(error)).toBe(expected);
  });
});
