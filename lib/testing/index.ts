export {
  claimStoreContract,
  ClaimStoreContractError,
  ClaimStoreContractTimingError,
  type ClaimStoreContractCase,
  type ClaimStoreHarness,
  CONTRACT_RETENTION_MS,
  describeClaimStoreContract,
} from './claim-store-contract.js';
export { MemoryClaimStore } from './memory-claim.store.js';
