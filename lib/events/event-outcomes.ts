import { JOB_TENANT_PREFIX, TICK_TENANT_PREFIX } from '../decisions/tenant-id.js';
import { type ChannelName, IDEMPOTENCY_CHANNELS } from './idempotency-events.js';

/**
 * The outcome each channel of a key (a request's, a job's, a tick's) counts as, in the
 * metrics' `idempotency.outcome`.
 */
export const KEY_OUTCOMES = {
  claimed: 'claimed',
  takenOver: 'taken_over',
  resumed: 'resumed',
  stored: 'stored',
  replayed: 'replayed',
  conflict: 'conflict',
  mismatch: 'mismatch',
  leaseLost: 'lease_lost',
  released: 'released',
  jobStep: 'job_step',
  tickSkipped: 'tick_skipped',
} as const satisfies Partial<Record<ChannelName, string>>;

/** Metric attributes: low-cardinality only (never the tenant or the key). */
export type MetricAttributes = Record<string, string | number | boolean>;

/** What one event adds to the metrics. */
export interface MetricPoints {
  outcome?: { attributes: MetricAttributes };
  duration?: { ms: number; attributes: MetricAttributes };
}

/** What a key is for, from its tenant: the library's own key spaces are a queue's and a task's. */
export type KeyKind = 'request' | 'job' | 'tick';

/** The kind of the key an event is about (see `RESERVED_TENANT_PREFIXES`). */
export function keyKind(tenant: string | undefined): KeyKind {
  if (tenant?.startsWith(JOB_TENANT_PREFIX)) return 'job';
  if (tenant?.startsWith(TICK_TENANT_PREFIX)) return 'tick';
  return 'request';
}

/**
 * The metrics of one key's event: the outcome counted with its route and kind (a request, a
 * job, a tick: from the tenant, which is never an attribute itself), the replay's source, the
 * stored status, the reason a key was given back or a tick skipped, a job step's move, and
 * the library's own time when the event carries it. Pure, so that the mapping is tested as a
 * table.
 */
export function metricPoints(
  channel: keyof typeof KEY_OUTCOMES,
  event: {
    route?: string;
    tenant?: string;
    status?: number;
    reason?: string;
    move?: string;
    fromMemory?: boolean;
    durationMs?: number;
  },
): MetricPoints {
  const kind = keyKind(event.tenant);
  const attributes: MetricAttributes = {
    'idempotency.outcome': KEY_OUTCOMES[channel],
    'idempotency.route': event.route ?? 'unknown',
    'idempotency.kind': kind,
  };
  if (event.status !== undefined) attributes['http.response.status_code'] = event.status;
  if (event.reason !== undefined) attributes['idempotency.reason'] = event.reason;
  if (event.move !== undefined) attributes['idempotency.job.move'] = event.move;
  if (event.fromMemory !== undefined) {
    attributes['idempotency.replay.source'] = event.fromMemory ? 'memory' : 'database';
  }
  const points: MetricPoints = { outcome: { attributes } };
  if (event.durationMs !== undefined) {
    points.duration = {
      ms: event.durationMs,
      attributes: {
        'idempotency.step': channel === 'stored' ? 'store' : 'decide',
        'idempotency.route': event.route ?? 'unknown',
        'idempotency.kind': kind,
      },
    };
  }
  return points;
}

/** One line for the debug log: what happened, to which key, never a body. */
export function debugLine(channel: ChannelName, event: Record<string, unknown>): string {
  // The time last, wherever the event built it.
  const { durationMs, ...rest } = event;
  const parts = Object.entries({ ...rest, durationMs })
    .filter(([, value]) => value !== undefined)
    .map(([name, value]) =>
      name === 'durationMs' && typeof value === 'number'
        ? `${name}=${value.toFixed(2)}`
        : `${name}=${JSON.stringify(value)}`,
    );
  return [IDEMPOTENCY_CHANNELS[channel], ...parts].join(' ');
}
