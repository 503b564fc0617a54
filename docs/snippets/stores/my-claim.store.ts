// Stands in for a store of your own: here, the memory reference behind ForwardingClaimStore.
import { ForwardingClaimStore } from 'nestjs-idempotency-pg';
import { MemoryClaimStore } from 'nestjs-idempotency-pg/testing';

export class MyClaimStore extends ForwardingClaimStore {
  constructor(
    readonly client: object,
    readonly settings: { retentionMs: number },
  ) {
    super(new MemoryClaimStore());
  }
}
