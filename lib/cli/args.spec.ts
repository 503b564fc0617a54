import { type Command, parseCommand, UsageError } from './args.js';

const URL = 'postgres://app@db/app';
const defaults = {
  leaseMs: 5_000,
  poolSize: 10,
  instances: 1,
  concurrency: undefined,
  stuckAfterMs: 60_000,
  migrationsTable: 'migrations',
};

describe('parseCommand', () => {
  it.each<[string[], NodeJS.ProcessEnv, Command]>([
    [[], {}, { kind: 'help' }],
    [['doctor', '--help'], {}, { kind: 'help' }],
    [['doctor', '--url', URL], {}, { kind: 'doctor', url: URL, settings: defaults }],
    [['doctor'], { DATABASE_URL: URL }, { kind: 'doctor', url: URL, settings: defaults }],
    [
      ['doctor', '--url', URL, '--lease-ms', '60000', '--pool-size', '20', '--instances', '3'],
      { DATABASE_URL: 'postgres://other' },
      {
        kind: 'doctor',
        url: URL,
        settings: { ...defaults, leaseMs: 60_000, poolSize: 20, instances: 3 },
      },
    ],
    [
      ['doctor', '--concurrency', '50', '--stuck-after-ms', '0', '--migrations-table', 'typeorm'],
      { DATABASE_URL: URL },
      {
        kind: 'doctor',
        url: URL,
        settings: { ...defaults, concurrency: 50, stuckAfterMs: 0, migrationsTable: 'typeorm' },
      },
    ],
    [['keys', 'list', '--url', URL], {}, { kind: 'keys list', url: URL, limit: 50 }],
    [['keys', 'list', '--limit', '5', '--url', URL], {}, { kind: 'keys list', url: URL, limit: 5 }],
    [
      ['keys', 'list', '--tenant', 'bullmq:payouts', '--url', URL],
      {},
      { kind: 'keys list', url: URL, limit: 50, tenant: 'bullmq:payouts' },
    ],
    [
      ['keys', 'show', 't 1', 'k-1', '--url', URL],
      {},
      { kind: 'keys show', url: URL, tenant: 't 1', key: 'k-1', body: false },
    ],
    [
      ['keys', 'show', 't1', 'k-1', '--body', '--url', URL],
      {},
      { kind: 'keys show', url: URL, tenant: 't1', key: 'k-1', body: true },
    ],
    // "" names the global key space (globalKeys: true keeps every key under tenant 0).
    [
      ['keys', 'show', '', 'k-1', '--url', URL],
      {},
      { kind: 'keys show', url: URL, tenant: '0', key: 'k-1', body: false },
    ],
    [
      ['keys', 'release', '', 'k-1', '--url', URL],
      {},
      { kind: 'keys release', url: URL, tenant: '0', key: 'k-1', yes: false },
    ],
    [
      ['keys', 'release', 't1', 'k-1', '-y', '--url', URL],
      {},
      { kind: 'keys release', url: URL, tenant: 't1', key: 'k-1', yes: true },
    ],
  ])('%j (env %j)', (argv, env, command) => {
    expect(parseCommand(argv, env)).toEqual(command);
  });

  it.each<[string[], string]>([
    [['doctor'], 'no database: give --url, or set DATABASE_URL'],
    [['cure', '--url', URL], 'unknown command "cure"'],
    [['doctor', 'now', '--url', URL], 'doctor takes no arguments: now'],
    [
      ['doctor', '--lease-ms', 'soon', '--url', URL],
      '--lease-ms must be a whole number of at least 1, not "soon"',
    ],
    [
      ['doctor', '--pool-size', '0', '--url', URL],
      '--pool-size must be a whole number of at least 1, not "0"',
    ],
    [
      ['keys', 'show', 't1', '--url', URL],
      'keys takes: list | show <tenant> <key> | release <tenant> <key>',
    ],
    [
      ['keys', 'purge', '--url', URL],
      'keys takes: list | show <tenant> <key> | release <tenant> <key>',
    ],
    [['doctor', '--colour', '--url', URL], "Unknown option '--colour'"],
    [['keys', 'list', '--tenant', '', '--url', URL], '--tenant needs the start of a tenant'],
  ])('%j is a usage error', (argv, message) => {
    expect(() => parseCommand(argv, {})).toThrow(UsageError);
    expect(() => parseCommand(argv, {})).toThrow(message);
  });
});
