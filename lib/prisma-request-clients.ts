import { type ExecutionContext } from '@nestjs/common';
import { ContextIdFactory } from '@nestjs/core';
import { type ContextId, type InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js';
import { REQUEST_CONTEXT_ID } from '@nestjs/core/router/request/request-constants.js';
import { prismaBatchingOf } from './data-layers/prisma/prisma-batching.js';
import { keepBatchesPerScope } from './data-layers/prisma/scoped-batches.js';

/**
 * The app's providers that have no instance at start-up (request-scoped ones, and those that
 * depend on one): a Prisma client among them (a client `$extends`-ed per request) is only met
 * inside a request. Kept until one gives a Prisma client: the library's hold on Prisma's
 * batching is per DataLoader class, so one client covers every client of its runtime.
 */
const waiting = new Set<InstanceWrapper>();

/** Notes a provider resolved per request, to be looked at in the requests that resolve it. */
export function watchRequestScoped(wrapper: InstanceWrapper): void {
  waiting.add(wrapper);
}

/** Forgets the providers noted (a module closed, another app started in the process). */
export function forgetRequestScoped(): void {
  waiting.clear();
}

/**
 * Before an idempotent handler runs: keeps the batches of a Prisma client that its request
 * resolved (see `watchRequestScoped`) per request, before the handler's first Prisma call.
 * Nothing to look at once a client was found, or on a route whose providers are all static
 * (its request has no context of Nest's own).
 */
export function keepRequestScopedBatches(context: ExecutionContext): void {
  if (waiting.size === 0) return;
  const request = requestOf(context);
  if (!request || !(request as Record<symbol, unknown>)[REQUEST_CONTEXT_ID]) return;
  const contextId = ContextIdFactory.getByRequest(request);
  for (const wrapper of waiting) {
    let instance: unknown;
    try {
      const host = wrapper.getInstanceByContextId(contextOf(contextId, wrapper));
      if (!host?.isResolved) continue;
      instance = host.instance;
    } catch {
      continue;
    }
    const batching = prismaBatchingOf(instance);
    if (batching.kind !== 'loader') continue;
    keepBatchesPerScope(batching.loader);
    waiting.clear();
    return;
  }
}

/**
 * The context a provider's instance of this request lives under, as Nest's injector reads it
 * (`Injector.getContextId`): a durable provider (`durable: true`, or one whose every
 * dependency is) lives under the sub-tree a `ContextIdStrategy` gives it (one per tenant),
 * not under the request's own context id, where its wrapper holds only an unresolved clone.
 * A transient provider belongs to its consumer, never to a durable sub-tree.
 */
export function contextOf(contextId: ContextId, wrapper: InstanceWrapper): ContextId {
  if (!contextId.getParent) return contextId;
  return contextId.getParent({
    token: wrapper.token,
    isTreeDurable: !wrapper.isTransient && wrapper.isDependencyTreeDurable(),
  });
}

function requestOf(context: ExecutionContext): object | undefined {
  if (context.getType<string>() === 'graphql') {
    // @nestjs/graphql keeps the operation's context id on its GraphQL context object
    // (`ContextIdFactory.getByRequest(gqlContext, ['req'])`, then defined on it), not on the
    // HTTP request behind it, which never went through Nest's router.
    const graphql = context.getArgs<unknown[]>()[2] as
      ({ req?: object } & Record<symbol, unknown>) | undefined;
    return graphql?.[REQUEST_CONTEXT_ID] ? graphql : graphql?.req;
  }
  if (context.getType() !== 'http') return undefined;
  return context.switchToHttp().getRequest<object>();
}
