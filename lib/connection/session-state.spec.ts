import {
  begunStateOf,
  librarySearchPath,
  pinSearchPath,
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

describe('librarySearchPath: the search path of the library’s own statements', () => {
  it.each([
    ['the start-up check’s, over a path kept at BEGIN', 'public', '=tenant_x', 'public'],
    ['the start-up check’s, with nothing kept', '"$user", public', undefined, '"$user", public'],
    ['the start-up check’s even when empty', '', '=tenant_x', ''],
    [
      'the one kept at BEGIN, with no check passed',
      undefined,
      '=tenant_x, public',
      'tenant_x, public',
    ],
    ['an empty one kept at BEGIN', undefined, '=', ''],
    ['none: the session’s own', undefined, undefined, undefined],
    ['none for a value not kept by CAPTURE_SESSION_STATE', undefined, '', undefined],
  ])('%s', (_name, pinned, keptPath, expected) => {
    expect(librarySearchPath(pinned, keptPath)).toBe(expected);
  });

  it('is set for the transaction alone, quoted as a literal', () => {
    expect(pinSearchPath("o'hara, public")).toBe(
      "SELECT set_config('search_path', 'o''hara, public', true)",
    );
  });

  it('is what restoreSessionState and swapSessionState set, over the path kept', () => {
    const pinned = "set_config('search_path', 'public', true)";
    expect(restoreSessionState({ ...kept, search_path: '=tenant_x' }, 'public')).toContain(pinned);
    expect(restoreSessionState(undefined, 'public')).toContain(pinned);
    const swap = swapSessionState(undefined, 'public');
    expect(swap.before.join(';')).toContain(pinned);
    // The handler's own path kept aside and put back after the library's statement.
    expect(swap.before[0]).toContain('idempotency.handler_search_path');
    expect(swap.after.join(';')).toContain('idempotency.handler_search_path');
  });
});
