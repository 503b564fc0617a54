import {
  type CallHandler,
  type ExecutionContext,
  Injectable,
  type NestInterceptor,
  RequestTimeoutException,
} from '@nestjs/common';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';

/**
 * `REQUEST_TIMEOUT_MS`: the usual RxJS `timeout()` interceptor, registered globally, so that it
 * runs outside `@Idempotent()`. Its 408 is not the handler's answer: the handler goes on in its
 * transaction, and its own answer is the one stored.
 */
@Injectable()
export class RequestTimeoutInterceptor implements NestInterceptor {
  constructor(private readonly timeoutMs: number) {}

  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(this.timeoutMs),
      catchError((error: unknown) =>
        error instanceof TimeoutError
          ? throwError(() => new RequestTimeoutException())
          : throwError(() => error),
      ),
    );
  }
}
