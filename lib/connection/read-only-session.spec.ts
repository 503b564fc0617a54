import { readOnlyExplanation, readOnlyLasts } from './read-only-session.js';

describe('readOnlyLasts', () => {
  it.each<[string, boolean, string, boolean]>([
    ['a primary read-only for the app’s database', false, 'database', true],
    ['a primary read-only for the app’s role', false, 'user', true],
    ['a primary read-only for the role in this database', false, 'database user', true],
    ['a primary read-only by the connection’s options', false, 'client', true],
    ['a primary read-only by a SET on the session', false, 'session', true],
    // pg_auto_failover's fence of a node it promotes: ALTER SYSTEM, lifted once it is primary.
    [
      'a primary fenced by ALTER SYSTEM (a failover in progress)',
      false,
      'configuration file',
      false,
    ],
    ['a primary started read-only (postgres -c)', false, 'command line', false],
    ['a standby (it may be promoted)', true, 'default', false],
    ['a standby whose database is read-only too', true, 'database', false],
    ['a primary whose default is off (a transaction made read-only)', false, 'default', false],
  ])('%s: lasting %s', (_name, inRecovery, source, expected) => {
    expect(readOnlyLasts({ inRecovery, source })).toBe(expected);
  });

  it('names where the setting was made', () => {
    expect(readOnlyExplanation({ inRecovery: false, source: 'database' })).toBe(
      'the database refuses writes on every session of the app: default_transaction_read_only ' +
        'is on for the database (ALTER DATABASE ... SET), on a primary. Turn it off there ' +
        '(e.g. ALTER DATABASE <name> RESET default_transaction_read_only), or point the app at ' +
        'a database it may write to',
    );
  });
});
