import { sqlReaderReady } from '../transaction/sql/sql-parse.js';
import { isSessionSetup, setupAsLocal } from './connection-setup.js';

beforeAll(() => sqlReaderReady());

describe('setupAsLocal', () => {
  it.each<[string, unknown, unknown, string | undefined]>([
    [
      'the search path',
      'SET search_path TO shop, public',
      [],
      'SET LOCAL search_path TO shop, public',
    ],
    ['SET SESSION', 'set session search_path = shop', undefined, 'SET LOCAL search_path = shop'],
    ['SET SCHEMA', "SET SCHEMA 'shop'", [], "SET LOCAL SCHEMA 'shop'"],
    ['the role', 'SET ROLE app_user', [], 'SET LOCAL ROLE app_user'],
    ['already local', 'SET LOCAL search_path TO shop', [], undefined],
    ['the session authorization', 'SET SESSION AUTHORIZATION app_user', [], undefined],
    ['another setting', "SET statement_timeout = '5s'", [], undefined],
    ['a default', 'SET search_path TO DEFAULT', [], undefined],
    ['with another statement', 'SET search_path TO shop; SELECT 1', [], undefined],
    [
      'the search path and the role in one text',
      'SET search_path TO shop, public; SET ROLE app_user;',
      [],
      'SET LOCAL search_path TO shop, public\n; SET LOCAL ROLE app_user',
    ],
    [
      'a line comment before the semicolon: ended by its newline, not swallowing the role',
      'SET search_path TO shop, public -- tenant first\n; SET ROLE app_user',
      [],
      'SET LOCAL search_path TO shop, public -- tenant first\n; SET LOCAL ROLE app_user',
    ],
    [
      'another setting then the search path: only the search path moved',
      "SET TIME ZONE 'UTC'; SET search_path TO shop",
      [],
      "SET TIME ZONE 'UTC'\n; SET LOCAL search_path TO shop",
    ],
    [
      'after a line comment',
      '-- the tenant schema first\nSET search_path TO shop, public',
      [],
      'SET LOCAL search_path TO shop, public',
    ],
    [
      'after a nested block comment, and a comment between SET and SESSION',
      '/* tenant /* é */ */ SET /* s */ SESSION search_path TO shop',
      [],
      'SET LOCAL search_path TO shop',
    ],
    [
      'a comment between SET and the role',
      'SET/* r */ROLE app_user',
      [],
      'SET LOCAL ROLE app_user',
    ],
    ['a comment before a read', '-- x\nSELECT 1', [], undefined],
    ['a SET LOCAL among them', 'SET LOCAL ROLE a; SET search_path TO shop', [], undefined],
    ['with values', 'SET search_path TO shop', [1], undefined],
    ['no SET', 'SELECT 1', [], undefined],
  ])('%s', (_name, text, values, expected) => {
    expect(setupAsLocal(text, values)).toBe(expected);
  });
});

describe('isSessionSetup (a view stays fresh while its texts are session SETs)', () => {
  it.each<[string, unknown, unknown, boolean]>([
    ['the search path', 'SET search_path TO shop, public', [], true],
    ['the role', 'SET ROLE app_user', undefined, true],
    ['another setting', "SET TIME ZONE 'UTC'", [], true],
    ['two SETs in one text', "SET TIME ZONE 'UTC'; SET ROLE app_user", [], true],
    ['a SET LOCAL (the handler code)', 'SET LOCAL ROLE app_user', [], false],
    ['a SET then a read', 'SET search_path TO shop; SELECT 1', [], false],
    ['with values', 'SET search_path TO shop', [1], false],
    ['a read', 'SELECT 1', [], false],
    ['a SET after a comment', '/* tenant */ SET search_path TO shop', [], true],
    ['a read after a comment', '-- x\nSELECT 1', [], false],
    ['no text', undefined, undefined, false],
  ])('%s', (_name, text, values, expected) => {
    expect(isSessionSetup(text, values)).toBe(expected);
  });
});
