import { type ArgumentsHost, Catch, type ExceptionFilter } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { IdempotencyError } from '../idempotency.errors.js';
import { type ServerResponse } from 'node:http';
import { pinContentType } from './pin-content-type.js';
import { toProblem } from './problem.js';

/**
 * Answers the library's errors thrown outside an `@Idempotent()` route (where the interceptor
 * maps them itself) as the same problem responses: a webhook or queue consumer whose
 * `ProcessedMessages.processOnce()` met an unreachable database answers 503 with `Retry-After`,
 * so its sender delivers the message again, rather than Nest's 500.
 *
 * @example app.useGlobalFilters(new IdempotencyErrorFilter(app.get(HttpAdapterHost)));
 * // or, per controller: @UseFilters(IdempotencyErrorFilter)
 */
@Catch(IdempotencyError)
export class IdempotencyErrorFilter implements ExceptionFilter<IdempotencyError> {
  constructor(private readonly adapterHost: HttpAdapterHost) {}

  catch(error: IdempotencyError, host: ArgumentsHost): void {
    // A message handler's error is its transport's to answer (a nack, a redelivery).
    if (host.getType() !== 'http') throw error;
    const problem = toProblem(error);
    const adapter = this.adapterHost.httpAdapter;
    const response = host.switchToHttp().getResponse<object>();
    if (adapter.isHeadersSent(response)) return;
    for (const [name, value] of Object.entries(problem.headers)) {
      adapter.setHeader(response, name, value);
    }
    const raw = (response as { raw?: ServerResponse }).raw ?? (response as ServerResponse);
    pinContentType(raw, problem.headers['content-type']);
    adapter.reply(response, problem.body, problem.status);
  }
}
