import { InvalidConnectionStringError, parseConnectionString } from './connection-string.js';

describe('parseConnectionString', () => {
  it.each<[string, string, RegExp]>([
    [
      'a misspelt parameter',
      'postgres://u:secret@h1,h2/db?sslmod=require',
      /^postgresConnection\(\): the parameter "sslmod" is not one node-postgres reads from a connection string, so it would be ignored; remove it or correct its name \(read: user, password, host, .*, target_session_attrs\)$/,
    ],
    [
      'a libpq parameter node-postgres ignores, for one host too',
      'postgres://u:secret@h1/db?keepalives=1',
      /the parameter "keepalives" is not one node-postgres reads/,
    ],
    ["libpq's dbname", 'postgres://u@h1,h2/db?dbname=other', /the parameter "dbname" is not one/],
    [
      'a host parameter beside a host list',
      'postgres://u@h1,h2/db?host=h3',
      /the parameter "host" would stand for every host listed; list the hosts as postgres:\/\/user@host1:port1,host2:port2\/database instead/,
    ],
    [
      'a session attribute that is not honoured',
      'postgres://u@h1,h2/db?target_session_attrs=primary',
      /target_session_attrs=primary is not supported: use read-write \(the host that accepts writes\) or any \(the first host that answers\)/,
    ],
    [
      'a connect_timeout that is not whole seconds',
      'postgres://u@h1,h2/db?connect_timeout=2.5',
      /connect_timeout must be a whole number of seconds, got "2\.5"/,
    ],
    ['an empty host in the list', 'postgres://u@h1,,h2/db', /the host list has an empty entry/],
  ])('refuses %s, by name', (_name, url, message) => {
    const refusal = (() => {
      try {
        parseConnectionString(url);
      } catch (error) {
        return error;
      }
      return undefined;
    })();
    expect(refusal).toBeInstanceOf(InvalidConnectionStringError);
    expect((refusal as Error).message).toMatch(message);
    expect((refusal as Error).message).not.toContain('secret');
  });

  it('keeps every parameter for every host, connect_timeout as milliseconds', () => {
    const parsed = parseConnectionString(
      'postgres://u:p%23w@h1:5433,[::1]/db?sslmode=disable&application_name=app' +
        '&options=-c%20search_path%3Dx&statement_timeout=100&connect_timeout=3' +
        '&target_session_attrs=read-write',
    );
    const common = {
      user: 'u',
      password: 'p#w',
      database: 'db',
      ssl: false,
      sslmode: 'disable',
      application_name: 'app',
      options: '-c search_path=x',
      statement_timeout: '100',
      connectionTimeoutMillis: 3000,
    };
    expect(parsed).toEqual({
      hosts: [
        { host: 'h1', port: 5433 },
        { host: '::1', port: 5432 },
      ],
      clients: [
        { ...common, host: 'h1', port: 5433 },
        { ...common, host: '::1' },
      ],
      readWrite: true,
    });
  });

  it.each([
    [
      'TLS files and modes read by node-postgres',
      'postgres://u@h1,h2/db?sslmode=no-verify',
      {
        ssl: { rejectUnauthorized: false },
      },
    ],
    ['no credentials: none, so the pool keeps its own', 'postgres://h1,h2/db', {}],
  ])('%s', (_name, url, expected) => {
    const { clients } = parseConnectionString(url)!;
    for (const client of clients) {
      expect(client).toMatchObject(expected);
      if (!url.includes('@')) expect(client).not.toHaveProperty('password');
    }
  });

  it.each([
    ['key=value pairs', 'host=h1 dbname=db'],
    ['a socket folder', '/var/run/postgresql db'],
  ])('leaves %s to node-postgres', (_name, url) => {
    expect(parseConnectionString(url)).toBeUndefined();
  });
});
