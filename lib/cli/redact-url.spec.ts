import { redactConnectionString } from './redact-url.js';

describe('redactConnectionString', () => {
  it.each<[string, string, string]>([
    ['no password', 'postgres://app@db:5432/app', 'postgres://app@db:5432/app'],
    ['user:pass@', 'postgres://app:secret@db:5432/app', 'postgres://app:***@db:5432/app'],
    ['an empty password', 'postgres://app:@db/app', 'postgres://app:***@db/app'],
    [
      'a percent-encoded password',
      'postgres://app:s%40cr%2Fet@db/app',
      'postgres://app:***@db/app',
    ],
    ['a raw @ in the password', 'postgres://app:p@ss@db/app', 'postgres://app:***@db/app'],
    ['?password=', 'postgres://app@db/app?password=secret', 'postgres://app@db/app?password=***'],
    [
      '&password= after another parameter',
      'postgres://db/app?sslmode=require&password=secret&application_name=x',
      'postgres://db/app?sslmode=require&password=***&application_name=x',
    ],
    [
      'the parameter name percent-encoded',
      'postgres://db/app?pass%77ord=secret',
      'postgres://db/app?pass%77ord=***',
    ],
    [
      'the parameter name upper-case',
      'postgres://db/app?PASSWORD=secret',
      'postgres://db/app?PASSWORD=***',
    ],
    [
      'a percent-encoded value',
      'postgres://db/app?password=s%26ecret',
      'postgres://db/app?password=***',
    ],
    ['sslpassword', 'postgres://db/app?sslpassword=keypass', 'postgres://db/app?sslpassword=***'],
    [
      'both forms at once',
      'postgresql://app:one@db/app?password=two',
      'postgresql://app:***@db/app?password=***',
    ],
    [
      'several hosts',
      'postgres://app:secret@db1:5432,db2:5433/app?target_session_attrs=read-write&password=x',
      'postgres://app:***@db1:5432,db2:5433/app?target_session_attrs=read-write&password=***',
    ],
    ['a fragment kept', 'postgres://db/app?password=s#frag', 'postgres://db/app?password=***#frag'],
    ['no path', 'postgres://app:secret@db', 'postgres://app:***@db'],
    [
      "libpq's keyword form",
      "host=db user=app password='a b' dbname=app",
      'host=db user=app password=*** dbname=app',
    ],
    [
      'a parameter that only ends in password',
      'postgres://db/app?notpassword=x',
      'postgres://db/app?notpassword=x',
    ],
  ])('%s', (_name, url, expected) => {
    const shown = redactConnectionString(url);
    expect(shown).toBe(expected);
    expect(shown).not.toMatch(/secret|one@|two|keypass/);
  });
});
