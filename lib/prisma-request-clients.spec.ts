import { type ContextId, type InstanceWrapper } from '@nestjs/core/injector/instance-wrapper.js';
import { contextOf } from './prisma-request-clients.js';

const requestId: ContextId = { id: 1 };
const tenantId: ContextId = { id: 2 };
/** A `ContextIdStrategy`'s context (Nest's docs' per-tenant one): durable trees go to the tenant. */
const tenantContext: ContextId = {
  id: 1,
  getParent: (info) => (info.isTreeDurable ? tenantId : requestId),
};

const wrapper = (durable: boolean, transient = false) =>
  ({
    token: 'TenantPrisma',
    isTransient: transient,
    isDependencyTreeDurable: () => durable,
  }) as unknown as InstanceWrapper;

describe('contextOf (where a provider of this request lives, as Nest resolves it)', () => {
  it.each<[string, ContextId, InstanceWrapper, ContextId]>([
    ['no strategy: the request context', requestId, wrapper(true), requestId],
    ['a durable provider: the tenant sub-tree', tenantContext, wrapper(true), tenantId],
    [
      'a request-scoped, not durable provider: the request',
      tenantContext,
      wrapper(false),
      requestId,
    ],
    [
      'a transient provider: never the durable sub-tree',
      tenantContext,
      wrapper(true, true),
      requestId,
    ],
  ])('%s', (_case, contextId, provider, expected) => {
    expect(contextOf(contextId, provider)).toBe(expected);
  });
});
