import { decideIsolation, type IsolationDecision, type IsolationState } from './isolation-level.js';

const refusedAfter = (current: string, asked: string) =>
  `the request's transaction already began at ${current}, and PostgreSQL cannot raise a ` +
  `transaction's isolation level once it began. Set it on the route, ` +
  `@Idempotent({ isolationLevel: '${asked}' }), or make this transaction the handler's first ` +
  `database work`;

describe('decideIsolation', () => {
  it.each<[string, string | undefined, IsolationState, IsolationDecision]>([
    ['no level asked, not begun', undefined, { begun: false }, { kind: 'join' }],
    [
      'no level asked, begun',
      undefined,
      { begun: true, current: 'READ COMMITTED' },
      { kind: 'join' },
    ],
    [
      'first: begins at the level asked',
      'SERIALIZABLE',
      { begun: false },
      { kind: 'begin-at', level: 'SERIALIZABLE' },
    ],
    [
      'first, READ UNCOMMITTED: begins at it',
      'READ UNCOMMITTED',
      { begun: false },
      { kind: 'begin-at', level: 'READ UNCOMMITTED' },
    ],
    [
      'first, stronger than the route’s: the stronger',
      'SERIALIZABLE',
      { begun: false, planned: 'REPEATABLE READ' },
      { kind: 'begin-at', level: 'SERIALIZABLE' },
    ],
    [
      'first, weaker than the route’s: the route’s',
      'READ COMMITTED',
      { begun: false, planned: 'SERIALIZABLE' },
      { kind: 'begin-at', level: 'SERIALIZABLE' },
    ],
    [
      'begun at the same level',
      'SERIALIZABLE',
      { begun: true, current: 'SERIALIZABLE' },
      { kind: 'join' },
    ],
    [
      'begun stronger',
      'REPEATABLE READ',
      { begun: true, current: 'SERIALIZABLE' },
      { kind: 'join' },
    ],
    [
      'READ UNCOMMITTED in READ COMMITTED (PostgreSQL runs them alike)',
      'READ UNCOMMITTED',
      { begun: true, current: 'READ COMMITTED' },
      { kind: 'join' },
    ],
    [
      'READ COMMITTED in READ UNCOMMITTED',
      'READ COMMITTED',
      { begun: true, current: 'READ UNCOMMITTED' },
      { kind: 'join' },
    ],
    [
      'begun weaker: refused',
      'SERIALIZABLE',
      { begun: true, current: 'READ COMMITTED' },
      { kind: 'refuse', reason: refusedAfter('READ COMMITTED', 'SERIALIZABLE') },
    ],
    [
      'REPEATABLE READ after READ COMMITTED: refused',
      'REPEATABLE READ',
      { begun: true, current: 'READ COMMITTED' },
      { kind: 'refuse', reason: refusedAfter('READ COMMITTED', 'REPEATABLE READ') },
    ],
    [
      'SERIALIZABLE after REPEATABLE READ: refused',
      'SERIALIZABLE',
      { begun: true, current: 'REPEATABLE READ' },
      { kind: 'refuse', reason: refusedAfter('REPEATABLE READ', 'SERIALIZABLE') },
    ],
    [
      'a level PostgreSQL does not have',
      'SNAPSHOT',
      { begun: false },
      {
        kind: 'refuse',
        reason:
          'SNAPSHOT is not an isolation level of PostgreSQL (READ UNCOMMITTED, READ COMMITTED, ' +
          'REPEATABLE READ, SERIALIZABLE)',
      },
    ],
  ])('%s', (_name, asked, state, expected) => {
    expect(decideIsolation(asked, state)).toEqual(expected);
  });
});
