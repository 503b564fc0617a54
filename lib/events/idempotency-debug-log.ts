import {
  Inject,
  Injectable,
  Logger,
  type OnModuleDestroy,
  type OnModuleInit,
} from '@nestjs/common';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from '../idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from '../shapes/idempotency-options.interface.js';
import { debugLine } from './event-outcomes.js';
import { ChannelSubscriptions } from './channel-subscriptions.js';
import { IDEMPOTENCY_CHANNELS } from './idempotency-events.js';

type ChannelName = keyof typeof IDEMPOTENCY_CHANNELS;

/**
 * With `debugEvents: true`, every event as a Nest `Logger.debug()` line (context
 * `Idempotency`): `idempotency:replayed route="Charges.create" tenant="7" key="k1" ...`. Off by
 * default, so that the request path builds no event for it.
 */
@Injectable()
export class IdempotencyDebugLog implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('Idempotency');
  private readonly subscriptions = new ChannelSubscriptions();

  constructor(
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
  ) {}

  onModuleInit(): void {
    if (!this.options.debugEvents) return;
    for (const name of Object.keys(IDEMPOTENCY_CHANNELS) as ChannelName[]) {
      this.subscriptions.on(IDEMPOTENCY_CHANNELS[name], (event) =>
        this.logger.debug(debugLine(name, event)),
      );
    }
  }

  onModuleDestroy(): void {
    this.subscriptions.close();
  }
}
