import {
  begunStateOf,
  RESTORE_SESSION_STATE,
  restoreSessionState,
  SWAP_IN_SESSION_STATE,
  swapSessionState,
} from './session-state.js';

const kept = { role: 'none', session_authorization: 'postgres', search_path: '="$user", public' };

describe('begunStateOf', () => {
  it.each([
    ['a simple query row', { ...kept, read_only: 'off' }, kept],
    ["node-postgres' fields", ['none', 'postgres', '="$user", public', 'off'], kept],
    ['no row', undefined, undefined],
    ['a search path not kept by CAPTURE_SESSION_STATE', { ...kept, search_path: '' }, undefined],
  ])('%s', (_name, row, expected) => {
    expect(begunStateOf(row)).toEqual(expected);
  });
});

describe('restoreSessionState and swapSessionState', () => {
  it('put back from the server-side settings when nothing is kept in the process', () => {
    expect(restoreSessionState()).toBe(RESTORE_SESSION_STATE);
    expect(swapSessionState().before).toEqual([SWAP_IN_SESSION_STATE]);
  });

  it.each([
    ['the role', "set_config('role', 'none', true)"],
    [
      'the search path, without its leading =',
      `set_config('search_path', '"$user", public', true)`,
    ],
  ])('put back %s from literals, which a RESET ALL cannot reach', (_what, text) => {
    expect(restoreSessionState(kept)).toContain(text);
    expect(restoreSessionState(kept)).not.toContain("current_setting('idempotency.role')");
    expect(swapSessionState(kept).before.join(';')).toContain(text);
  });
});
