import { GLOBAL_KEYS_TENANT } from '../shapes/idempotency.constants.js';
import { BODY_POINTER_MARKER } from '../answer/bodies/body-pointer.js';
import { SEALED_MARKER } from '../answer/response-sealer.js';
import { type KeyRow, type StoredBody } from './database.js';
import { formatDuration } from './duration.js';

/**
 * What `keys` prints and decides, as pure functions of the rows read (times by the database's
 * clock, carried in each row's `now`).
 */

/**
 * `in flight`: a worker holds the lease; `stuck`: unfinished with its lease expired (its
 * worker died, nobody retried since); `given back`: unfinished with no lease at all, released
 * on purpose (a 503 to retry, or `keys release`): it waits for its client's retry, which
 * resumes it, and the purge takes it if none comes. Not an operator's problem, so not stuck.
 */
export type KeyStatus = 'in flight' | 'stuck' | 'given back' | 'finished';

export function keyStatus(row: Pick<KeyRow, 'state' | 'lockedUntil' | 'now'>): KeyStatus {
  if (row.state === 'done') return 'finished';
  if (row.lockedUntil === null) return 'given back';
  return row.lockedUntil.getTime() > row.now.getTime() ? 'in flight' : 'stuck';
}

/** A tenant or key as typed on a command line: JSON-quoted when it has blanks or controls. */
export function printable(text: string): string {
  return /^[\x21-\x7e]+$/.test(text) ? text : JSON.stringify(text);
}

function lease(row: Pick<KeyRow, 'lockedUntil' | 'now'>): string {
  if (row.lockedUntil === null) return 'none';
  const left = row.lockedUntil.getTime() - row.now.getTime();
  return left > 0 ? `ends in ${formatDuration(left)}` : `expired ${formatDuration(-left)} ago`;
}

/** `keys list`: a table of unfinished keys, then how many of each. */
export function formatKeyList(rows: readonly KeyRow[], limit: number): string {
  if (rows.length === 0) return 'No unfinished keys.\n';
  const header = ['STATUS', 'TENANT', 'KEY', 'PHASE', 'LOCK', 'AGE', 'LEASE'];
  const cells = rows.map((row) => [
    keyStatus(row),
    printable(row.tenantId),
    printable(row.key),
    row.recoveryPoint,
    row.lockVersion,
    formatDuration(row.now.getTime() - row.createdAt.getTime()),
    lease(row),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const line = (cols: string[]) =>
    cols
      .map((c, i) => (i === cols.length - 1 ? c : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd();
  const count = (status: KeyStatus) => rows.filter((r) => keyStatus(r) === status).length;
  const givenBack = count('given back');
  const more = rows.length === limit ? ` (the first ${limit}: --limit shows more)` : '';
  return (
    [line(header), ...cells.map(line)].join('\n') +
    `\n${rows.length} unfinished: ${count('in flight')} in flight, ${count('stuck')} stuck` +
    `${givenBack > 0 ? `, ${givenBack} given back (waiting for their retry)` : ''}${more}.\n`
  );
}

/** `keys show`: one key's state, phases, lease, owner and timings; the body only if asked. */
export function formatKey(row: KeyRow, stored?: StoredBody): string {
  const age = (at: Date) =>
    `${at.toISOString()} (${formatDuration(row.now.getTime() - at.getTime())} ago)`;
  const lines: [string, string][] = [
    ['tenant', printable(row.tenantId)],
    ['key', printable(row.key)],
    ['status', keyStatus(row)],
    ['recovery point', row.recoveryPoint],
    ['phases', row.phases.length === 0 ? 'none' : row.phases.join(', ')],
    [
      'lease',
      row.lockedUntil === null ? 'none' : `${row.lockedUntil.toISOString()} (${lease(row)})`,
    ],
    ['lock version', row.lockVersion],
    ['claim id', row.claimId],
    ['created', age(row.createdAt)],
    ['finished', row.finishedAt === null ? 'no' : age(row.finishedAt)],
  ];
  if (row.responseCode !== null) {
    lines.push([
      'response',
      `${row.responseCode}, ${row.responseBytes ?? 0} bytes stored` +
        (stored === undefined ? ' (--body prints them)' : ''),
    ]);
  }
  const width = Math.max(...lines.map(([name]) => name.length)) + 1;
  let text = lines.map(([name, value]) => `${`${name}:`.padEnd(width)} ${value}`).join('\n') + '\n';
  if (stored !== undefined) text += `${bodyText(stored)}\n`;
  return text;
}

/**
 * The body as stored, or what it is when the command cannot print it: sealed with the app's
 * encryption key, or kept apart in idempotency_response_bodies (the row holds a pointer).
 */
export function bodyText({ body, headers }: StoredBody): string {
  if (headers !== null && SEALED_MARKER in headers) {
    const bytes = body?.length ?? 0;
    return `(sealed with the app's encryption key: ${bytes} bytes the command cannot read)`;
  }
  if (headers !== null && BODY_POINTER_MARKER in headers) {
    return `(stored apart in idempotency_response_bodies: ${headers[BODY_POINTER_MARKER]})`;
  }
  return body === null ? '(no body stored)' : body.toString('utf8');
}

/**
 * `keys show` or `keys release` of a key the tenant given does not have: where the key is, if
 * it is kept under other tenants (the usual cause: an app with `globalKeys: true`, whose keys
 * are all under tenant ${GLOBAL_KEYS_TENANT}, looked up under another).
 */
export function noSuchKey(tenant: string, key: string, elsewhere: readonly string[]): string {
  if (elsewhere.length === 0) return 'no such key';
  const under = elsewhere.map(printable).join(', ');
  const global = elsewhere.includes(GLOBAL_KEYS_TENANT)
    ? ` (an app with globalKeys: true keeps its keys under tenant ${GLOBAL_KEYS_TENANT}, which "" names too)`
    : '';
  return (
    `no such key under tenant ${printable(tenant)}; the key ${printable(key)} is kept under ` +
    `tenant${elsewhere.length > 1 ? 's' : ''} ${under}${global}`
  );
}

/** Whether `keys release` may release a key, and if not, why. */
export type ReleaseVerdict = { release: true } | { release: false; reason: string };

export function releaseVerdict(row: KeyRow | undefined): ReleaseVerdict {
  if (row === undefined) return { release: false, reason: 'no such key' };
  if (row.state === 'done') {
    return {
      release: false,
      reason: `the key is finished (response ${row.responseCode}): a finished key is never released`,
    };
  }
  return { release: true };
}

/** What `keys release` says once it released a key. */
export function releasedMessage(row: KeyRow): string {
  const was =
    keyStatus(row) === 'in flight'
      ? `its lease would have run ${lease(row).replace('ends in ', 'another ')}`
      : `its lease had ${lease(row)}`;
  return (
    `Released ${printable(row.tenantId)} ${printable(row.key)} (lock version ${row.lockVersion}; ` +
    `${was}): the next request with this key takes it over and resumes after ` +
    `"${row.recoveryPoint}".\n`
  );
}
