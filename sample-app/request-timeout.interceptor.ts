import {
  type CallHandler,
  type ExecutionContext,
  Injectable,
  type NestInterceptor,
  RequestTimeoutException,
} from '@nestjs/common';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';

/**
 * `REQUEST_TIMEOUT_MS`: the usual RxJS `timeout()` interceptor, as many Nest apps have one.
 * Registered globally, it runs outside a route's `@Idempotent()`: when it fires, it unsubscribes
 * from a handler that may still be running, and its 408 is not the handler's answer.
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
