import { parseArgs } from 'node:util';
import { DEFAULT_LEASE_MS, GLOBAL_KEYS_TENANT } from '../shapes/idempotency.constants.js';
import { type DoctorSettings } from './doctor-checks.js';

/** The command line, read into what to do. A `UsageError` prints the usage and exits 2. */
export type Command =
  | { kind: 'help' }
  | { kind: 'doctor'; url: string; settings: DoctorSettings }
  | { kind: 'keys list'; url: string; limit: number; tenant?: string }
  | { kind: 'keys show'; url: string; tenant: string; key: string; body: boolean }
  | { kind: 'keys release'; url: string; tenant: string; key: string; yes: boolean };

export class UsageError extends Error {}

export const USAGE = `Usage: nestjs-idempotency-pg <command> [--url postgres://...]

Commands:
  doctor                     what is wrong with the database the app uses
    --lease-ms N             the app's leaseMs (default ${DEFAULT_LEASE_MS})
    --pool-size N            the app's pool size per instance (default 10, pg's)
    --instances N            how many instances share the database (default 1)
    --concurrency N          requests one instance serves at once
    --stuck-after-ms N       a key is stuck once its lease expired this long ago (default 60000)
    --migrations-table NAME  TypeORM's migrations table (default migrations)
  keys list [--limit N]      unfinished keys: in flight and stuck (default limit 50)
    --tenant TENANT          only that tenant's: a queue's jobs (bullmq:payouts); ending in
                             ":", the tenants that begin so: every queue's (bullmq:), the
                             scheduled tasks (schedule:)
  keys show <tenant> <key>   one key: state, phases, lease, owner, timings
    --body                   its stored response body too
  keys release <tenant> <key>
                             ends the lease of an unfinished key, so that the next request
                             with it takes it over; asks first, unless --yes

<tenant> is the id the app's tenant function returned; "" names the one key space of an app
with globalKeys: true (kept as tenant ${GLOBAL_KEYS_TENANT}).
--url defaults to the DATABASE_URL environment variable.
Exit codes: 0 healthy / done, 1 problems found / not done, 2 usage.
`;

const OPTIONS = {
  url: { type: 'string' },
  'lease-ms': { type: 'string' },
  'pool-size': { type: 'string' },
  instances: { type: 'string' },
  concurrency: { type: 'string' },
  'stuck-after-ms': { type: 'string' },
  'migrations-table': { type: 'string' },
  limit: { type: 'string' },
  tenant: { type: 'string' },
  body: { type: 'boolean' },
  yes: { type: 'boolean', short: 'y' },
  help: { type: 'boolean', short: 'h' },
} as const;

function count(name: string, value: string | undefined, fallback: number, least = 1): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < least) {
    throw new UsageError(`--${name} must be a whole number of at least ${least}, not "${value}"`);
  }
  return n;
}

export function parseCommand(argv: readonly string[], env: NodeJS.ProcessEnv): Command {
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const { values, positionals } = parsed;
  if (values.help || positionals.length === 0) return { kind: 'help' };
  const url = values.url ?? env.DATABASE_URL;
  const needUrl = (): string => {
    if (!url) throw new UsageError('no database: give --url, or set DATABASE_URL');
    return url;
  };
  const [command, sub, ...rest] = positionals;
  if (command === 'doctor') {
    if (positionals.length > 1) throw new UsageError(`doctor takes no arguments: ${sub}`);
    const concurrency = values.concurrency;
    return {
      kind: 'doctor',
      url: needUrl(),
      settings: {
        leaseMs: count('lease-ms', values['lease-ms'], DEFAULT_LEASE_MS),
        poolSize: count('pool-size', values['pool-size'], 10),
        instances: count('instances', values.instances, 1),
        concurrency: concurrency === undefined ? undefined : count('concurrency', concurrency, 1),
        stuckAfterMs: count('stuck-after-ms', values['stuck-after-ms'], 60_000, 0),
        migrationsTable: values['migrations-table'] ?? 'migrations',
      },
    };
  }
  if (command === 'keys') {
    if (sub === 'list' && rest.length === 0) {
      const limit = count('limit', values.limit, 50);
      if (values.tenant === '') throw new UsageError('--tenant needs the start of a tenant');
      const tenant = values.tenant === undefined ? {} : { tenant: values.tenant };
      return { kind: 'keys list', url: needUrl(), limit, ...tenant };
    }
    if ((sub === 'show' || sub === 'release') && rest.length === 2) {
      // No tenant id is empty (the library refuses one), so "" can name the global key space.
      const tenant = rest[0] === '' ? GLOBAL_KEYS_TENANT : rest[0];
      const key = rest[1];
      return sub === 'show'
        ? { kind: 'keys show', url: needUrl(), tenant, key, body: values.body ?? false }
        : { kind: 'keys release', url: needUrl(), tenant, key, yes: values.yes ?? false };
    }
    throw new UsageError('keys takes: list | show <tenant> <key> | release <tenant> <key>');
  }
  throw new UsageError(`unknown command "${command}"`);
}
