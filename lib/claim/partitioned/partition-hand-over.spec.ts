import { type HandOver, handOvers, type PartitionOwnership } from './partition-hand-over.js';

function row(overrides: Partial<PartitionOwnership>): PartitionOwnership {
  return {
    partition: 'idempotency_keys_20261207t120000000',
    schema: 'public',
    owner: 'api',
    keysOwner: 'migrator',
    ours: true,
    memberOfKeysOwner: true,
    keysOwnerMayCreate: true,
    ...overrides,
  };
}

describe('handOvers', () => {
  it.each<[string, PartitionOwnership[], HandOver[]]>([
    ['no partitions', [], []],
    ["the keys table's owner's already", [row({ owner: 'migrator' })], []],
    [
      'made by this role, the owner may take it',
      [row({})],
      [{ kind: 'give', partition: 'idempotency_keys_20261207t120000000', to: 'migrator' }],
    ],
    ["another role's (only its own sessions may give it)", [row({ ours: false })], []],
    ["this role not a member of the keys table's owner", [row({ memberOfKeysOwner: false })], []],
    [
      'the owner without CREATE on the schema: blocked, with what to grant',
      [row({ schema: 'app', keysOwnerMayCreate: false })],
      [
        {
          kind: 'blocked',
          partition: 'idempotency_keys_20261207t120000000',
          schema: 'app',
          keysOwner: 'migrator',
        },
      ],
    ],
    [
      'several, in order, each on its own',
      [
        row({ partition: 'a' }),
        row({ partition: 'b', owner: 'migrator' }),
        row({ partition: 'c', ours: false }),
        row({ partition: 'd' }),
      ],
      [
        { kind: 'give', partition: 'a', to: 'migrator' },
        { kind: 'give', partition: 'd', to: 'migrator' },
      ],
    ],
  ])('%s', (_case, partitions, expected) => {
    expect(handOvers(partitions)).toEqual(expected);
  });
});
