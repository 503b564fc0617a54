import { pinnedText, quoteName, resolvedLibraryPath, searchPathNames } from './library-path.js';

describe('searchPathNames: a search_path setting read as PostgreSQL reads it', () => {
  it.each<[string, string, string, string[]]>([
    ['the default', '"$user", public', 'app', ['app', 'public']],
    ['$user unquoted', '$user,public', 'app', ['app', 'public']],
    ['$user is the login role, given as is', '"$user"', 'Acme Co', ['Acme Co']],
    ['unquoted capitals folded', 'IDEM, Public', 'app', ['idem', 'public']],
    ['a quoted name kept, "" a quote', 'public, "Idem ""Keys"""', 'app', ['public', 'Idem "Keys"']],
    ['a comma inside quotes', '"a,b", c', 'app', ['a,b', 'c']],
    ['blanks around', '  tenant_x ,  public  ', 'app', ['tenant_x', 'public']],
    ['empty', '', 'app', []],
    ['an empty quoted name', '""', 'app', ['']],
    ['cut to 63 bytes', 'x'.repeat(70), 'app', ['x'.repeat(63)]],
  ])('%s', (_name, setting, user, expected) => {
    expect(searchPathNames(setting, user)).toEqual(expected);
  });
});

describe('resolvedLibraryPath: the pinned path, from the session’s default one', () => {
  const existing =
    (...schemas: string[]) =>
    (name: string) =>
      schemas.includes(name);
  it.each<[string, string, string, (name: string) => boolean, string]>([
    [
      '"$user" without a schema of the login role’s: public alone',
      '"$user", public',
      'app',
      existing('public', 'acme'),
      '"public"',
    ],
    [
      '"$user" with one: the login role’s, never a SET ROLE’s',
      '"$user", public',
      'app',
      existing('public', 'app', 'acme'),
      '"app", "public"',
    ],
    [
      'a schema that does not exist left out',
      'idem, missing, public',
      'app',
      existing('idem', 'public'),
      '"idem", "public"',
    ],
    [
      'names quoted one by one',
      'public, "Idem Keys"',
      'app',
      existing('public', 'Idem Keys'),
      '"public", "Idem Keys"',
    ],
    ['a quote in a name doubled', '"a""b"', 'app', existing('a"b'), '"a""b"'],
    ['a name listed twice once', 'public, PUBLIC', 'app', existing('public'), '"public"'],
    [
      'pg_temp and pg_catalog kept where written',
      'public, pg_temp',
      'app',
      existing('public'),
      '"public", "pg_temp"',
    ],
    ['nothing that exists: empty', 'nowhere', 'app', existing(), ''],
    ['a role whose name needs quotes', '"$user"', 'Acme Co', existing('Acme Co'), '"Acme Co"'],
  ])('%s', (_name, setting, user, exists, expected) => {
    expect(resolvedLibraryPath(setting, user, exists)).toBe(expected);
  });
});

describe('quoteName and pinnedText', () => {
  it('quotes always, doubling quotes', () => {
    expect(quoteName('$user')).toBe('"$user"');
    expect(quoteName('a"b')).toBe('"a""b"');
  });

  it('sets the path first in a simple query’s text, or leaves it as it is', () => {
    expect(pinnedText('COMMIT', '"public"')).toBe(
      `SELECT set_config('search_path', '"public"', true); COMMIT`,
    );
    expect(pinnedText('COMMIT', undefined)).toBe('COMMIT');
  });
});
