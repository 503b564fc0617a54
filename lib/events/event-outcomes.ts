import { IDEMPOTENCY_CHANNELS } from './idempotency-events.js';

type ChannelName = keyof typeof IDEMPOTENCY_CHANNELS;

/** The outcome each request channel counts as, in the metrics' `idempotency.outcome`. */
export const REQUEST_OUTCOMES = {
  claimed: 'claimed',
  takenOver: 'taken_over',
  resumed: 'resumed',
  stored: 'stored',
  replayed: 'replayed',
  conflict: 'conflict',
  mismatch: 'mismatch',
  leaseLost: 'lease_lost',
  released: 'released',
} as const satisfies Partial<Record<ChannelName, string>>;

/** Metric attributes: low-cardinality only (never the tenant or the key). */
export type MetricAttributes = Record<string, string | number | boolean>;

/** What one event adds to the metrics. */
export interface MetricPoints {
  outcome?: { attributes: MetricAttributes };
  duration?: { ms: number; attributes: MetricAttributes };
}

/**
 * The metrics of one request event: the outcome counted with its route (and the replay's
 * source, the stored status, the reason a key was given back), and the library's own time
 * when the event carries it. Pure, so that the mapping is tested as a table.
 */
export function metricPoints(
  channel: keyof typeof REQUEST_OUTCOMES,
  event: {
    route?: string;
    status?: number;
    reason?: string;
    fromMemory?: boolean;
    durationMs?: number;
  },
): MetricPoints {
  const attributes: MetricAttributes = {
    'idempotency.outcome': REQUEST_OUTCOMES[channel],
    'idempotency.route': event.route ?? 'unknown',
  };
  if (event.status !== undefined) attributes['http.response.status_code'] = event.status;
  if (event.reason !== undefined) attributes['idempotency.reason'] = event.reason;
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
