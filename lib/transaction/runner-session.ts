import { type DataSource, type QueryRunner } from 'typeorm';

/**
 * The session its code set up on a runner's own connection outside the request (a guard's `SET
 * search_path TO tenant_acme`, `SET ROLE`, `SET statement_timeout`): the session authorization
 * and role (which `pg_settings` does not list), then every setting set for the session, each as
 * `current_setting` reads it (units included). Not the transaction's own settings, which a
 * transaction under way cannot take. Custom settings (`SET app.tenant`) are not listed by
 * PostgreSQL anywhere, so they are not read: the guide says so.
 */
export const READ_RUNNER_SESSION =
  'SELECT name, setting FROM (' +
  "SELECT 0 AS at, 'session_authorization' AS name, " +
  "current_setting('session_authorization') AS setting " +
  "UNION ALL SELECT 1, 'role', current_setting('role') " +
  'UNION ALL SELECT 2, name, current_setting(name) FROM pg_settings ' +
  "WHERE source = 'session' AND name NOT LIKE 'transaction\\_%' " +
  "AND name NOT IN ('session_authorization', 'role')" +
  ') AS session ORDER BY at, name';

/**
 * Sets, in the request's transaction (`SET LOCAL`: gone at its end), those of the read settings
 * (`$1` names, `$2` values, in `READ_RUNNER_SESSION`'s order: the authorization before the role
 * it resets) whose value differs there, in one round trip; answers each one set with the value
 * it had (`was`, null for a custom setting not defined), which the runner's own connection is
 * given back with (`RESET_RUNNER_SESSION`).
 */
export const CARRY_RUNNER_SESSION =
  'WITH carried AS MATERIALIZED (' +
  'SELECT s.at, s.name, s.setting, current_setting(s.name, true) AS was ' +
  'FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS s(name, setting, at) ' +
  'WHERE current_setting(s.name, true) IS DISTINCT FROM s.setting' +
  ') SELECT name, was, set_config(name, setting, true) AS now FROM carried';

/**
 * Puts back, on the runner's own connection before it goes back to the pool, the settings the
 * request's transaction took from it (`$1` names, `$2` the values they had there: a pooled
 * connection's own, a null resets), in their order.
 */
export const RESET_RUNNER_SESSION =
  'SELECT set_config(s.name, s.was, false) ' +
  'FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS s(name, was, at) ORDER BY s.at';

interface Carried {
  name: string;
  was: string | null;
}

/** The statements of a view that must run after the session is carried into the transaction. */
const SENDING = new Set<PropertyKey>(['query', 'stream', 'startTransaction', 'connect']);

/**
 * `view` (of the request's open transaction) for a runner `own` that its code connected outside
 * every request and set a session up on (`placeOfRunner`'s `join-with-session`): before its
 * first statement, that session is read from `own`'s connection and set in the request's
 * transaction (`SET LOCAL`, those that differ), so its writes land where its code pointed them
 * (the tenant's schema, as its role) and commit or roll back with the request (adversary 90: a
 * tenant's row committed apart, and the retry wrote it again). Its `release()` releases the
 * view and gives `own`'s connection back to the pool with what was carried put back as the
 * request's connection had it, so that the next user of that pooled connection (the library's
 * own statements among them) does not meet the tenant's search path.
 */
export function carryingSession(
  dataSource: DataSource,
  view: QueryRunner,
  own: QueryRunner,
  releaseOwn: (error?: unknown) => Promise<void>,
): QueryRunner {
  let carrying: Promise<Carried[]> | undefined;
  // On `view` and `own` themselves, never through the returned runner: no re-entry.
  const carry = (): Promise<Carried[]> =>
    (carrying ??= (async () => {
      const read = (await own.query(READ_RUNNER_SESSION)) as { name: string; setting: string }[];
      if (read.length === 0) return [];
      return (await view.query(CARRY_RUNNER_SESSION, [
        read.map((row) => row.name),
        read.map((row) => row.setting),
      ])) as Carried[];
    })());
  const giveBack = async (): Promise<void> => {
    if (own.isReleased) return;
    const carried = carrying ? await carrying.catch(() => []) : [];
    try {
      if (carried.length > 0) {
        await own.query(RESET_RUNNER_SESSION, [
          carried.map((row) => row.name),
          carried.map((row) => row.was),
        ]);
      }
    } catch (error) {
      // Not put back: destroyed rather than pooled with the tenant's session.
      await releaseOwn(error);
      return;
    }
    await releaseOwn();
  };
  let manager: unknown;
  const carrier: QueryRunner = new Proxy(view, {
    get(target, property) {
      if (property === 'manager') return (manager ??= dataSource.createEntityManager(carrier));
      const value = Reflect.get(target, property) as unknown;
      if (typeof value !== 'function' || property === 'constructor') return value;
      const call = value as (...args: unknown[]) => unknown;
      if (SENDING.has(property)) {
        return (...args: unknown[]) => carry().then(() => call.apply(target, args));
      }
      if (property === 'release') {
        return async () => {
          try {
            await call.apply(target, []);
          } finally {
            await giveBack();
          }
        };
      }
      return call.bind(target);
    },
    set(target, property, value) {
      // Its manager (an EntityManager made for it sets itself there): its own, not the view's.
      if (property === 'manager') {
        manager = value;
        return true;
      }
      return Reflect.set(target, property, value);
    },
  });
  return carrier;
}
