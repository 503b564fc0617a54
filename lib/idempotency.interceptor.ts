import {
  type CallHandler,
  type ExecutionContext,
  HttpException,
  Inject,
  Injectable,
  Logger,
  type NestInterceptor,
} from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { type ServerResponse } from 'node:http';
import { catchError, finalize, from, mergeMap, Observable, of, tap, throwError } from 'rxjs';
import {
  HTTP_CODE_METADATA,
  RESPONSE_PASSTHROUGH_METADATA,
  ROUTE_ARGS_METADATA,
} from '@nestjs/common/constants.js';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum.js';
import { decide } from './decide.js';
import { InvalidJsonError } from './fingerprint/canonical-json.js';
import { computeFingerprint, fingerprintInput } from './fingerprint/fingerprint.js';
import { problemResponse, toProblem } from './http/problem.js';
import { holdResponse, send } from './http/response-hold.js';
import { IDEMPOTENT_ROUTE_OPTIONS, REPLAYED_HEADER } from './idempotency.constants.js';
import { type ActiveClaim, IdempotencyContext, idempotencyStorage } from './idempotency-context.js';
import {
  IdempotencyError,
  IdempotencyKeyInProgressError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyMismatchError,
  IdempotencyKeyMissingError,
  IdempotencyLeaseLostError,
  IdempotencyStoreUnavailableError,
  IdempotencyRequestInvalidError,
  IdempotencyTenantInvalidError,
  RetryLaterError,
} from './idempotency.errors.js';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from './idempotency.module-definition.js';
import {
  type IdempotencyRequest,
  type IdempotencyRouteOptions,
  type ResolvedIdempotencyOptions,
  type ResolvedRouteOptions,
} from './idempotency-options.interface.js';
import { resolveRouteOptions } from './idempotency-options.js';
import { parseIdempotencyKey } from './idempotency-key.js';
import { IdempotencyStore, type KeyScope } from './storage/idempotency-store.interface.js';
import { type StoredResponse } from './stored-response.js';
import { normalizeTenantId } from './tenant-id.js';

/**
 * The edge of the library: key -> fingerprint -> claim -> decide -> run or reply. It is kept
 * thin; every decision is a pure function, and every HTTP status comes from `toProblem()`.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  private readonly logger = new Logger('Idempotency');
  private readonly routes = new WeakMap<object, RouteSettings>();

  constructor(
    private readonly reflector: Reflector,
    private readonly adapterHost: HttpAdapterHost,
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
    @Inject(IdempotencyStore) private readonly store: IdempotencyStore,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    if (context.getType() !== 'http') return next.handle();
    const http = context.switchToHttp();
    const request = http.getRequest<IdempotencyRequest>();
    const response = http.getResponse<object>();
    const { route, httpCode, responseHandled } = this.routeSettings(context);
    const defaultStatus = httpCode ?? (request.method === 'POST' ? 201 : 200);

    const parsed = parseIdempotencyKey(request.headers[this.options.headerKey]);
    if (parsed.kind === 'missing') {
      return route.required
        ? this.fail(response, new IdempotencyKeyMissingError(this.options.headerName))
        : this.runWithoutKey(defaultStatus, rawResponse(response), next);
    }
    if (parsed.kind === 'invalid') {
      return this.fail(
        response,
        new IdempotencyKeyInvalidError(this.options.headerName, parsed.reason),
      );
    }
    const resolved = this.options.tenant(request);
    const tenantId = normalizeTenantId(resolved);
    if (tenantId === undefined) {
      return this.fail(response, new IdempotencyTenantInvalidError(resolved));
    }
    const scope: KeyScope = { tenantId, key: parsed.key };
    let fingerprint: Buffer;
    try {
      fingerprint = computeFingerprint(fingerprintInput(request, route));
    } catch (error) {
      // A body the parser took but that is not one JSON value (duplicate keys, say).
      if (!(error instanceof InvalidJsonError)) throw error;
      return this.fail(response, new IdempotencyRequestInvalidError(error.message));
    }
    const raw = rawResponse(response);
    const execute = (claim: ActiveClaim) => this.execute(claim, route, defaultStatus, raw, next);

    return from(this.store.claim(scope, fingerprint, route.leaseMs)).pipe(
      mergeMap((outcome) => {
        if (outcome.kind === 'claimed') return execute(outcome.claim);
        const decision = decide(outcome.existing, fingerprint);
        switch (decision.kind) {
          case 'replay':
            return this.replay(raw, decision.response, responseHandled);
          case 'mismatch':
            throw new IdempotencyKeyMismatchError();
          case 'in-progress':
            throw new IdempotencyKeyInProgressError(decision.retryAfterSeconds);
          case 'take-over':
            return from(this.store.takeOver(scope, decision.fence, route.leaseMs)).pipe(
              mergeMap((claim) => {
                // Another worker won the same expired lease a moment before us.
                if (!claim) throw new IdempotencyKeyInProgressError(1);
                return execute(claim);
              }),
            );
        }
      }),
      catchError((error: unknown) =>
        error instanceof IdempotencyError ? this.fail(response, error) : throwError(() => error),
      ),
    );
  }

  /**
   * Runs the handler as the key's owner. The response the adapter writes is held until it is
   * stored (fenced by the claim's lock version), so a client never receives an answer that a
   * retry could not replay.
   */
  private execute(
    claim: ActiveClaim,
    route: ResolvedRouteOptions,
    defaultStatus: number,
    raw: ServerResponse,
    next: CallHandler,
  ): Observable<unknown> {
    const context = new IdempotencyContext(claim, defaultStatus);
    /** Set when the request is torn down before its handler started: the key is given back. */
    let givingBack: Promise<void> | undefined;
    const letThrough = holdResponse(
      raw,
      async (written) => {
        // The last phase stored its response already: that one goes out, byte for byte.
        if (context.finished) return context.finished;
        if (givingBack) {
          // Not the handler's answer: not stored, and sent once the key is free again.
          await givingBack;
          return undefined;
        }
        return (await this.store.complete(claim, written))
          ? undefined
          : problemResponse(new IdempotencyLeaseLostError());
      },
      // The handler ran; only its response could not be stored.
      (error) =>
        problemResponse(
          new IdempotencyStoreUnavailableError(
            error instanceof IdempotencyStoreUnavailableError ? error.cause : error,
            1,
            true,
          ),
        ),
    );
    const handled = runInContext(context, next);
    const stopHeartbeat = route.heartbeat ? this.startHeartbeat(claim) : undefined;
    let settled = false;
    return handled.pipe(
      tap({ complete: () => (settled = true), error: () => (settled = true) }),
      finalize(() => {
        stopHeartbeat?.();
        // Unsubscribed before the handler's answer (an outer timeout interceptor, say): what
        // goes out now is not the handler's answer, so it is not stored. A handler that never
        // started gives its key back (and must not start late); one still running keeps its
        // lease, and its phases (finish() included) still commit.
        if (settled || context.finished) return;
        if (context.handlerStarted) {
          letThrough();
        } else {
          context.abandoned = true;
          givingBack = this.releaseQuietly(claim, true);
        }
      }),
      catchError((error: unknown) => {
        // The last phase committed: its stored response goes out in place of this error.
        if (context.finished) return throwError(() => error);
        if (!context.handlerStarted) {
          // Failed in a guard, pipe or interceptor: nothing ran, so the key is given back.
          letThrough();
          return this.releaseThenThrow(claim, true, error);
        }
        // Nothing final happened: the work resumes when the client retries with the same key.
        if (error instanceof RetryLaterError || error instanceof IdempotencyStoreUnavailableError) {
          letThrough();
          return this.releaseThenThrow(claim, false, error);
        }
        if (error instanceof IdempotencyLeaseLostError) letThrough();
        return throwError(() => error);
      }),
    );
  }

  /**
   * A request without a key on a route whose key is optional: nothing is claimed or stored,
   * but its phases run (as plain transactions) and a `respond()` status still goes out.
   */
  private runWithoutKey(defaultStatus: number, raw: ServerResponse, next: CallHandler) {
    const context = new IdempotencyContext(undefined, defaultStatus);
    holdResponse(
      raw,
      async () => context.finished,
      () => undefined,
    );
    return runInContext(context, next);
  }

  /**
   * Extends the lease while the handler runs, so that a short lease (a fast takeover after a
   * real crash) does not hand a slow but live worker's key to another one.
   */
  private startHeartbeat(claim: ActiveClaim): () => void {
    const timer = setInterval(
      () => {
        this.store.extendLease(claim).then(
          (held) => {
            if (!held) clearInterval(timer);
          },
          (error: unknown) =>
            this.logger.warn(`heartbeat of key ${claim.key} failed: ${String(error)}`),
        );
      },
      Math.max(50, Math.floor(claim.leaseMs / 3)),
    );
    timer.unref();
    return () => clearInterval(timer);
  }

  private releaseThenThrow(claim: ActiveClaim, forget: boolean, error: unknown) {
    return from(this.releaseQuietly(claim, forget)).pipe(mergeMap(() => throwError(() => error)));
  }

  private releaseQuietly(claim: ActiveClaim, forget: boolean): Promise<void> {
    return this.store.release(claim, forget).catch((releaseError: unknown) => {
      // The lease then simply runs out, and a retry takes the key over.
      this.logger.warn(`could not release key ${claim.key}: ${String(releaseError)}`);
    });
  }

  /**
   * The adapter sends an empty body; the hold puts the stored response in its place. On a
   * route that writes its own response (`@Res()`), Nest sends nothing: it is written here.
   */
  private replay(raw: ServerResponse, stored: StoredResponse, responseHandled: boolean) {
    const replayed: StoredResponse = {
      status: stored.status,
      headers: { ...stored.headers, [REPLAYED_HEADER.toLowerCase()]: 'true' },
      body: stored.body,
    };
    if (responseHandled) {
      send(raw, replayed, true);
    } else {
      holdResponse(
        raw,
        async () => replayed,
        () => replayed,
      );
    }
    return of(undefined);
  }

  private fail(response: object, error: IdempotencyError): Observable<never> {
    const problem = toProblem(error);
    const adapter = this.adapterHost.httpAdapter;
    for (const [name, value] of Object.entries(problem.headers)) {
      adapter.setHeader(response, name, value);
    }
    return throwError(() => new HttpException(problem.body, problem.status, { cause: error }));
  }

  /** A route's settings, read from its metadata once and kept for the next requests. */
  private routeSettings(context: ExecutionContext): RouteSettings {
    const handler = context.getHandler();
    let settings = this.routes.get(handler);
    if (!settings) {
      const own = this.reflector.get<IdempotencyRouteOptions | undefined>(
        IDEMPOTENT_ROUTE_OPTIONS,
        handler,
      );
      settings = {
        route: resolveRouteOptions(own ?? {}, this.options.route),
        httpCode: this.reflector.get<number | undefined>(HTTP_CODE_METADATA, handler),
        responseHandled: writesOwnResponse(context.getClass(), handler.name),
      };
      this.routes.set(handler, settings);
    }
    return settings;
  }
}

/**
 * Runs the handler inside the request's async context: Nest calls the handler when the
 * observable is subscribed to, so the subscription is what runs inside the context.
 */
function runInContext(context: IdempotencyContext, next: CallHandler): Observable<unknown> {
  return new Observable<unknown>((subscriber) =>
    idempotencyStorage.run(context, () => next.handle().subscribe(subscriber)),
  );
}

interface RouteSettings {
  route: ResolvedRouteOptions;
  httpCode: number | undefined;
  /** `@Res()` or `@Next()` without passthrough: Nest leaves the response to the handler. */
  responseHandled: boolean;
}

/** Nest's own rule (RouterExecutionContext.isResponseHandled), read from the same metadata. */
function writesOwnResponse(controller: object, method: string): boolean {
  const args = (Reflect.getMetadata(ROUTE_ARGS_METADATA, controller, method) ?? {}) as object;
  const takesResponse = Object.keys(args).some((key) => {
    const type = Number(key.split(':')[0]);
    return type === RouteParamtypes.RESPONSE || type === RouteParamtypes.NEXT;
  });
  return takesResponse && !Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, controller, method);
}

/** Node's response under either adapter: Express's is one, Fastify's reply wraps it. */
function rawResponse(response: object): ServerResponse {
  return ((response as { raw?: ServerResponse }).raw ?? response) as ServerResponse;
}
