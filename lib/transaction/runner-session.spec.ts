import { type DataSource, type QueryRunner } from 'typeorm';
import {
  CARRY_RUNNER_SESSION,
  carryingSession,
  READ_RUNNER_SESSION,
  RESET_RUNNER_SESSION,
} from './runner-session.js';

interface Case {
  /** The session read from the runner's own connection. */
  read: { name: string; setting: string }[];
  /** What the request's transaction answers the carry with (the settings it set). */
  carried: { name: string; was: string | null }[];
  /** Statements its code sends before `release()`. */
  statements: number;
  /** The runner's own connection was given back already (its code's own release). */
  ownReleased?: boolean;
  /** Putting the carried settings back on its own connection fails. */
  resetFails?: boolean;
  calls: string[];
}

function fakes(c: Case) {
  const calls: string[] = [];
  const label = (text: string) =>
    text === READ_RUNNER_SESSION
      ? 'read'
      : text === CARRY_RUNNER_SESSION
        ? 'carry'
        : text === RESET_RUNNER_SESSION
          ? 'reset'
          : text;
  const own = {
    isReleased: c.ownReleased ?? false,
    query(text: string, values?: unknown[]) {
      calls.push(`own ${label(text)}${values ? ' ' + JSON.stringify(values) : ''}`);
      if (text === RESET_RUNNER_SESSION && c.resetFails) return Promise.reject(new Error('gone'));
      return Promise.resolve(text === READ_RUNNER_SESSION ? c.read : []);
    },
  } as unknown as QueryRunner;
  const view = {
    query(text: string) {
      calls.push(`view ${label(text)}`);
      return Promise.resolve(text === CARRY_RUNNER_SESSION ? c.carried : []);
    },
    release() {
      calls.push('view release');
      return Promise.resolve();
    },
  } as unknown as QueryRunner;
  const dataSource = {
    createEntityManager: (runner: QueryRunner) => ({ queryRunner: runner }),
  } as unknown as DataSource;
  const carrier = carryingSession(dataSource, view, own, (error) => {
    calls.push(error ? 'own destroyed' : 'own released');
    return Promise.resolve();
  });
  return { calls, carrier };
}

describe('carryingSession: a connected runner’s session in the request’s transaction (adversary 90)', () => {
  it.each<[string, Case]>([
    [
      'a tenant’s search path: carried before its first statement, put back at release',
      {
        read: [{ name: 'search_path', setting: 'tenant_acme' }],
        carried: [{ name: 'search_path', was: '"$user", public' }],
        statements: 2,
        calls: [
          'own read',
          'view carry',
          'view INSERT 1',
          'view INSERT 2',
          'view release',
          'own reset [["search_path"],["\\"$user\\", public"]]',
          'own released',
        ],
      },
    ],
    [
      'the same session as the request’s: nothing carried, nothing put back',
      {
        read: [{ name: 'role', setting: 'none' }],
        carried: [],
        statements: 1,
        calls: ['own read', 'view carry', 'view INSERT 1', 'view release', 'own released'],
      },
    ],
    [
      'no statement before release: nothing read',
      {
        read: [{ name: 'search_path', setting: 'tenant_acme' }],
        carried: [],
        statements: 0,
        calls: ['view release', 'own released'],
      },
    ],
    [
      'its own connection released already: not again',
      {
        read: [],
        carried: [],
        statements: 1,
        ownReleased: true,
        calls: ['own read', 'view INSERT 1', 'view release'],
      },
    ],
    [
      'the put back fails: destroyed, not pooled with the tenant’s session',
      {
        read: [{ name: 'search_path', setting: 'tenant_acme' }],
        carried: [{ name: 'search_path', was: null }],
        statements: 1,
        resetFails: true,
        calls: [
          'own read',
          'view carry',
          'view INSERT 1',
          'view release',
          'own reset [["search_path"],[null]]',
          'own destroyed',
        ],
      },
    ],
  ])('%s', async (_name, c) => {
    const { calls, carrier } = fakes(c);
    await Promise.all(
      Array.from({ length: c.statements }, (_, at) => carrier.query(`INSERT ${at + 1}`)),
    );
    await carrier.release();
    expect(calls).toEqual(c.calls);
  });

  it('its manager runs on it, not on the view', () => {
    const { carrier } = fakes({ read: [], carried: [], statements: 0, calls: [] });
    expect((carrier.manager as unknown as { queryRunner: unknown }).queryRunner).toBe(carrier);
  });
});
