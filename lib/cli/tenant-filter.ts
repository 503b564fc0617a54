/**
 * What `keys list --tenant T` lists (a pure decision): the tenant `T` itself, or, where `T`
 * ends at a boundary of the library's tenants (`:`: `bullmq:`, `schedule:`, a BullMQ prefix's
 * queues `bullmq:<prefix>:`), every tenant that begins with it. A bare prefix would take a
 * queue's tenant (`bullmq:payouts`) for the start of every longer queue name's too
 * (`bullmq:payouts-eu`, `bullmq:payouts-dlq`): adversary 78, "one queue's" keys were several.
 */
export interface TenantFilter {
  tenant: string;
  /** Every tenant that begins with `tenant`, not only that one. */
  prefix: boolean;
}

export function tenantFilter(given: string): TenantFilter {
  return { tenant: given, prefix: given.endsWith(':') };
}
