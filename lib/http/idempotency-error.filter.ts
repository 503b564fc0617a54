import {
  type ArgumentsHost,
  Catch,
  type ExceptionFilter,
  Inject,
  Logger,
  Optional,
} from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { IdempotencyError } from '../shapes/idempotency.errors.js';
import { type ServerResponse } from 'node:http';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from '../idempotency.module-definition.js';
import { pinContentType } from './pin-content-type.js';
import { noteWrittenLibraryError } from './written-library-error.js';
import { answerProblem, PROBLEM_CONTENT_TYPE, type ProblemRenderer } from './problem.js';

/**
 * Answers the library's errors thrown outside an `@Idempotent()` route (where the interceptor
 * maps them itself) as the same problem responses: a webhook or queue consumer whose
 * `ProcessedMessages.processOnce()` met an unreachable database answers 503 with `Retry-After`,
 * so its sender delivers the message again, rather than Nest's 500. The module's
 * `renderProblem` shapes them as it shapes the interceptor's answers; built with `new`, the
 * filter takes it as its second argument.
 *
 * @example app.useGlobalFilters(new IdempotencyErrorFilter(app.get(HttpAdapterHost), { renderProblem }));
 * // or, per controller (the module's renderProblem is injected): @UseFilters(IdempotencyErrorFilter)
 */
@Catch(IdempotencyError)
export class IdempotencyErrorFilter implements ExceptionFilter<IdempotencyError> {
  private readonly logger = new Logger('Idempotency');

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    @Optional()
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS)
    private readonly options?: { renderProblem?: ProblemRenderer },
  ) {}

  catch(error: IdempotencyError, host: ArgumentsHost): void {
    // A message handler's error is its transport's to answer (a nack, a redelivery).
    if (host.getType() !== 'http') throw error;
    const answer = answerProblem(error, this.options?.renderProblem, (reason) =>
      this.logger.error(`renderProblem failed, the problem went out as it is: ${String(reason)}`),
    );
    const adapter = this.adapterHost.httpAdapter;
    const response = host.switchToHttp().getResponse<object>();
    if (adapter.isHeadersSent(response)) return;
    for (const [name, value] of Object.entries(answer.headers)) {
      adapter.setHeader(response, name, value);
    }
    const raw = (response as { raw?: ServerResponse }).raw ?? (response as ServerResponse);
    pinContentType(raw, answer.headers['content-type'] ?? PROBLEM_CONTENT_TYPE);
    noteWrittenLibraryError(raw, error);
    adapter.reply(response, answer.body, answer.status);
  }
}
