import { describeClaimStoreContract } from 'nestjs-idempotency-pg/testing';
import { MyClaimStore } from './my-claim.store.js';

const client = {}; // your store's connection

describeClaimStoreContract('my store', {
  create: ({ retentionMs }) => new MyClaimStore(client, { retentionMs }),
});
