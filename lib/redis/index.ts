export {
  RedisClaimStore,
  type RedisClaimStoreOptions,
  type RedisScriptClient,
} from './redis-claim.store.js';
