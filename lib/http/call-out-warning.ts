import { type Logger } from '@nestjs/common';
import { subscribe } from 'node:diagnostics_channel';
import { currentIdempotencyContext } from '../transaction/idempotency-context.js';

/** Node's own channels for an HTTP request leaving the process: `http`'s and `fetch`'s. */
const CHANNELS = ['http.client.request.start', 'undici:request:create'] as const;

/** Routes already warned about, so that a busy route logs it once per process. */
const warned = new Set<string>();
let watching: Logger | undefined;

/**
 * Watches the HTTP requests the process sends (node's `http` and `fetch`, through their
 * diagnostics channels, free when nothing is subscribed): one sent by a handler whose claim
 * is not committed yet (`oneCommit`) holds that claim's connection and transaction across the
 * call, and a crash after it runs the call again with nothing derived from the key to tell the
 * other system it is a retry. The library cannot commit the claim there (the call is already
 * on its way), so it says what to do, once per route.
 */
export function warnOnCallOut(logger: Logger): void {
  if (watching) return;
  watching = logger;
  for (const channel of CHANNELS) {
    subscribe(channel, (message) => {
      const context = currentIdempotencyContext();
      if (!context?.transaction?.claimUncommitted || warned.has(context.route)) return;
      warned.add(context.route);
      watching?.warn(callOutWarning(context.route, target(message)));
    });
  }
}

/** The warning for a route that called `where` while its claim was not committed. */
export function callOutWarning(route: string, where: string | undefined): string {
  return (
    `${route || 'a route'} called another system${where ? ` (${where})` : ''} while its claim ` +
    'was not committed (oneCommit): its connection and transaction are held across the call, ' +
    'and a crash after it runs the call again with no key derived from the claim. Make the ' +
    'call in phases.call() (which commits the claim first and gives it a derived key), or set ' +
    'oneCommit: false on the route'
  );
}

/** Where a request goes, from either channel's message. */
function target(message: unknown): string | undefined {
  const request = (message as { request?: Record<string, unknown> } | null)?.request;
  if (!request) return undefined;
  if (typeof request.origin === 'string') return request.origin;
  return typeof request.host === 'string' ? request.host : undefined;
}
