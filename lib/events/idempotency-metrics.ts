import {
  Inject,
  Injectable,
  Logger,
  type OnModuleDestroy,
  type OnModuleInit,
} from '@nestjs/common';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from '../idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from '../shapes/idempotency-options.interface.js';
import { ClaimStore } from '../shapes/claim-store.interface.js';
import { type MetricAttributes, metricPoints, KEY_OUTCOMES } from './event-outcomes.js';
import { ChannelSubscriptions } from './channel-subscriptions.js';
import { IDEMPOTENCY_CHANNELS } from './idempotency-events.js';
import { type OtelMeter } from '../shapes/otel-meter.js';

export { type OtelMeter, type OtelMeterProvider } from '../shapes/otel-meter.js';

const METER_NAME = 'nestjs-idempotency-pg';

/**
 * The library's events as OpenTelemetry metrics: outcomes counted by route, the library's own
 * time on the request path, rows purged, consumers' duplicates, and the age of the oldest
 * unfinished key. It subscribes to the events only when a real meter is there (an SDK
 * registered before the app started, or `metrics: { meterProvider }`): with no SDK the
 * request path builds no event at all.
 */
@Injectable()
export class IdempotencyMetrics implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('Idempotency');
  private readonly subscriptions = new ChannelSubscriptions();
  private removeGauge?: () => void;

  constructor(
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
    @Inject(ClaimStore) private readonly store: ClaimStore,
  ) {}

  async onModuleInit(): Promise<void> {
    const meter = await this.meter();
    if (!meter) return;
    const outcomes = meter.createCounter('idempotency.outcomes', {
      description:
        'Outcomes of idempotent requests: a new key counts claimed, then stored or released',
      unit: '{outcome}',
    });
    const duration = meter.createHistogram('idempotency.duration', {
      description:
        "The library's own time on a request: deciding (key, fingerprint, claim), storing the answer",
      unit: 'ms',
    });
    const purged = meter.createCounter('idempotency.purged', {
      description: 'Rows deleted by the retention purge',
      unit: '{row}',
    });
    const duplicates = meter.createCounter('idempotency.consumer.duplicates', {
      description: 'Messages a consumer had processed before, delivered again and applied nothing',
      unit: '{message}',
    });
    const oldest = meter.createObservableGauge('idempotency.oldest_unfinished_key.age', {
      description: 'Age of the oldest key claimed and never finished, held or stuck (0 when none)',
      unit: 's',
    });
    const readOldest = async (result: { observe(value: number): void }) => {
      try {
        result.observe(((await this.store.oldestUnfinishedAgeMs()) ?? 0) / 1000);
      } catch (error) {
        this.logger.warn(`the oldest unfinished key's age was not read: ${String(error)}`);
      }
    };
    oldest.addCallback(readOldest);
    // Taken off on shutdown: a provider that outlives the app must not query its closed pool.
    this.removeGauge = () => oldest.removeCallback(readOldest);

    for (const channel of Object.keys(KEY_OUTCOMES) as (keyof typeof KEY_OUTCOMES)[]) {
      this.subscriptions.on(IDEMPOTENCY_CHANNELS[channel], (event) => {
        const points = metricPoints(channel, event);
        if (points.outcome) outcomes.add(1, points.outcome.attributes);
        if (points.duration) duration.record(points.duration.ms, points.duration.attributes);
      });
    }
    this.subscriptions.on(IDEMPOTENCY_CHANNELS.purged, (event) => {
      for (const kind of ['finished', 'abandoned', 'processedMessages'] as const) {
        const rows = event[kind];
        if (typeof rows === 'number' && rows > 0) {
          purged.add(rows, { 'idempotency.purge.kind': kind } satisfies MetricAttributes);
        }
      }
    });
    this.subscriptions.on(IDEMPOTENCY_CHANNELS.consumerDuplicate, (event) => {
      duplicates.add(1, { 'idempotency.consumer': String(event.consumer) });
    });
    const givenUp = meter.createCounter('idempotency.consumer.given_up', {
      description: 'Messages given up after maxAttempts failed deliveries',
      unit: '{message}',
    });
    this.subscriptions.on(IDEMPOTENCY_CHANNELS.consumerGaveUp, (event) => {
      givenUp.add(1, { 'idempotency.consumer': String(event.consumer) });
    });
  }

  onModuleDestroy(): void {
    this.subscriptions.close();
    this.removeGauge?.();
  }

  /** The meter to use, or undefined when there is none worth subscribing for. */
  private async meter(): Promise<OtelMeter | undefined> {
    const setting = this.options.metrics;
    if (setting === false) return undefined;
    if (setting !== true) return setting.meterProvider.getMeter(METER_NAME);
    let api: typeof import('@opentelemetry/api');
    try {
      api = await import('@opentelemetry/api');
    } catch {
      return undefined; // not installed: an optional peer dependency
    }
    const meter = api.metrics.getMeter(METER_NAME);
    // No SDK registered: the API hands out its no-op meter, and counting would cost the
    // request path its events for nothing.
    return meter.constructor === api.createNoopMeter().constructor ? undefined : meter;
  }
}
