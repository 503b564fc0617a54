import { sqlReaderReady } from '../transaction/sql/sql-parse.js';
import { oneShotSettingsOf } from './one-shot-settings.js';

beforeAll(() => sqlReaderReady());

describe('oneShotSettingsOf', () => {
  it.each<[string, string, ReturnType<typeof oneShotSettingsOf>]>([
    [
      'a timeout for a read in one text',
      "SET LOCAL statement_timeout = '200ms'; SELECT 1",
      { names: ['statement_timeout'], identity: false },
    ],
    [
      'a tenant for a read in one text',
      "SELECT set_config('app.tenant', 'a', true); SELECT 1",
      { names: ['app.tenant'], identity: false },
    ],
    [
      'a role for a read in one text',
      'SET LOCAL ROLE reporter; SELECT 1',
      { names: [], identity: true },
    ],
    // A statement alone sets the request's transaction (the RLS recipe at the top level).
    ['SET LOCAL alone', "SET LOCAL statement_timeout = '200ms'", undefined],
    ['SET LOCAL ROLE alone', 'SET LOCAL ROLE reporter', undefined],
    ['several statements that set nothing', 'SELECT 1; SELECT 2', undefined],
    ['a session setting (refused elsewhere)', "SET statement_timeout = '1s'; SELECT 1", undefined],
  ])('%s', (_case, text, expected) => {
    expect(oneShotSettingsOf(text)).toEqual(expected);
  });
});
