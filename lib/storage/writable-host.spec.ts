import { parseMultiHostUrl } from './writable-host.js';

describe('parseMultiHostUrl', () => {
  it.each<[string, string, ReturnType<typeof parseMultiHostUrl>]>([
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
  ])('%s', (_name, url, expected) => {
    expect(parseMultiHostUrl(url)).toEqual(expected);
  });
});
