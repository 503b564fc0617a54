import { applyDecorators, SetMetadata, UseInterceptors } from '@nestjs/common';
import { IDEMPOTENT_MESSAGE_OPTIONS } from '../shapes/idempotency.constants.js';
import { IdempotentMessageInterceptor } from './idempotent-message.interceptor.js';
import {
  type IdempotentMessageOptions,
  resolveMessageOptions,
} from './idempotent-message.options.js';

/**
 * Applies a message handler's effects once per message id, however often the broker delivers
 * it: the id is recorded in the same transaction as the handler's database work (its
 * repositories and `dataSource` join it, as on an `@Idempotent()` route), so a redelivery,
 * a retried publish, or a second consumer on the queue finds it done and applies nothing.
 * For `@EventPattern` and `@MessagePattern` handlers of `@nestjs/microservices`.
 *
 * @example
 * @EventPattern('charge.refunded')
 * @IdempotentMessage({ ack: true })
 * async refund(@Payload() event: RefundEvent) { await this.refunds.insert(...) }
 */
export function IdempotentMessage(options: IdempotentMessageOptions = {}): MethodDecorator {
  resolveMessageOptions(options, 'handler'); // validated now: a wrong option fails at start-up
  return applyDecorators(
    SetMetadata(IDEMPOTENT_MESSAGE_OPTIONS, options),
    UseInterceptors(IdempotentMessageInterceptor),
  );
}
