import { InvalidConnectionStringError } from './connection-string.js';
import {
  connectTimeoutMs,
  parseMultiHostUrl,
  postgresConnection,
  probeOrder,
} from './writable-host.js';

describe('parseMultiHostUrl', () => {
  it.each<[string, string, Omit<NonNullable<ReturnType<typeof parseMultiHostUrl>>, 'clients'>?]>([
    ['one host: read by node-postgres itself', 'postgres://u:p@h1:5432/db', undefined],
    [
      'two hosts, read-write',
      'postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=read-write',
      {
        hosts: [
          { host: 'h1', port: 5432 },
          { host: 'h2', port: 5433 },
        ],
        user: 'u',
        password: 'p',
        database: 'db',
        readWrite: true,
      },
    ],
    [
      'default ports, escaped credentials, no session attribute',
      'postgresql://us%40er:p%2Fw@h1,h2/my%20db',
      {
        hosts: [
          { host: 'h1', port: 5432 },
          { host: 'h2', port: 5432 },
        ],
        user: 'us@er',
        password: 'p/w',
        database: 'my db',
        readWrite: false,
      },
    ],
    [
      'IPv6 hosts in brackets',
      'postgres://u@[::1]:5432,[fe80::1]/db?target_session_attrs=read-write',
      {
        hosts: [
          { host: '::1', port: 5432 },
          { host: 'fe80::1', port: 5432 },
        ],
        user: 'u',
        password: undefined,
        database: 'db',
        readWrite: true,
      },
    ],
    [
      'a password with every reserved character escaped',
      'postgres://u:p%40ss%3Aw%2Fo%25r%23d@h1,h2/db',
      {
        hosts: [
          { host: 'h1', port: 5432 },
          { host: 'h2', port: 5432 },
        ],
        user: 'u',
        password: 'p@ss:w/o%r#d',
        database: 'db',
        readWrite: false,
      },
    ],
    [
      'a password with ":" and "@" as they are: up to the last "@", as node-postgres reads',
      'postgres://u:p@ss:w%2Fo%25r%23d@h1,h2/db',
      {
        hosts: [
          { host: 'h1', port: 5432 },
          { host: 'h2', port: 5432 },
        ],
        user: 'u',
        password: 'p@ss:w/o%r#d',
        database: 'db',
        readWrite: false,
      },
    ],
  ])('%s', (_name, url, expected) => {
    const parsed = parseMultiHostUrl(url);
    if (!expected) return expect(parsed).toBeUndefined();
    const { clients, ...rest } = parsed!;
    expect(rest).toEqual(expected);
    // Each host's own parameters are what node-postgres reads for it: its host and port.
    expect(clients.map(({ host, port }) => ({ host, port: port ?? 5432 }))).toEqual(expected.hosts);
  });
});

describe('probeOrder', () => {
  it.each<[string, number, number | undefined, number[]]>([
    ['nothing answered yet: as listed', 3, undefined, [0, 1, 2]],
    ['the first answered last: as listed', 3, 0, [0, 1, 2]],
    ['the third answered last: it first, then the rest as listed', 3, 2, [2, 0, 1]],
    ['the second of two', 2, 1, [1, 0]],
    ['a remembered index out of range is ignored', 2, 5, [0, 1]],
  ])('%s', (_name, count, lastGood, expected) => {
    expect(probeOrder(count, lastGood)).toEqual(expected);
  });
});

describe('connectTimeoutMs', () => {
  it.each<[string, number | undefined, number | undefined, number]>([
    ["the string's connect_timeout first", 2000, 5000, 2000],
    ["else the pool's connectionTimeoutMillis", undefined, 5000, 5000],
    ['else ten seconds', undefined, undefined, 10_000],
    ['0 is unset, as in pg', 0, 0, 10_000],
  ])('%s', (_name, fromUrl, fromPool, expected) => {
    expect(connectTimeoutMs(fromUrl, fromPool)).toBe(expected);
  });
});

describe('postgresConnection', () => {
  it.each<[string, string, Record<string, unknown>]>([
    [
      'one host: the string, for node-postgres',
      'postgres://u:p@h1/db',
      { url: 'postgres://u:p@h1/db' },
    ],
    [
      "one host's connect_timeout: the pool's too, node-postgres reads none from a string",
      'postgres://u:p@h1/db?connect_timeout=3',
      { url: 'postgres://u:p@h1/db?connect_timeout=3', extra: { connectionTimeoutMillis: 3000 } },
    ],
    [
      'one host, read-write: the client that checks it accepts writes',
      'postgres://u:p@h1:5433/db?target_session_attrs=read-write',
      {
        host: 'h1',
        port: 5433,
        username: 'u',
        password: 'p',
        database: 'db',
        extra: { Client: expect.any(Function) },
      },
    ],
    [
      'two hosts: the first for TypeORM, the client that chooses, the timeout for the pool',
      'postgres://u:p@h1,h2/db?connect_timeout=2',
      {
        host: 'h1',
        port: 5432,
        username: 'u',
        password: 'p',
        database: 'db',
        extra: { connectionTimeoutMillis: 2000, Client: expect.any(Function) },
      },
    ],
  ])('%s', (_name, url, expected) => {
    expect(postgresConnection(url)).toEqual(expected);
  });

  it.each([
    ['one host', 'postgres://u@h1/db?sslmod=require'],
    ['two hosts', 'postgres://u@h1,h2/db?sslmod=require'],
  ])('refuses a parameter node-postgres would ignore, with %s, at start-up', (_name, url) => {
    expect(() => postgresConnection(url)).toThrow(InvalidConnectionStringError);
    expect(() => postgresConnection(url)).toThrow(
      /the parameter "sslmod" is not one node-postgres reads/,
    );
  });
});
