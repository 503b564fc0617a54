// The package's public API: everything a user imports comes from here, by name.
export { IdempotencyModule } from './idempotency.module.js';
export { IDEMPOTENCY_MODULE_OPTIONS } from './idempotency.module-definition.js';
export { Idempotent } from './idempotent.decorator.js';
export { IdempotencyInterceptor } from './idempotency.interceptor.js';
export { IdempotentMessage } from './messages/idempotent-message.decorator.js';
export {
  IdempotentMessageInterceptor,
  MessageIdMissingError,
  MessageIdUnusableError,
} from './messages/idempotent-message.interceptor.js';
export { type IdempotentMessageOptions } from './messages/idempotent-message.options.js';
export { IdempotentJob } from './jobs/idempotent-job.decorator.js';
export { type IdempotentJobOptions } from './jobs/idempotent-job.options.js';
export { type JobLike } from './jobs/job-like.js';
export { IdempotentJobs } from './jobs/idempotent-jobs.service.js';
export { IdempotentTask } from './tasks/idempotent-task.decorator.js';
export { type IdempotentTaskOptions } from './tasks/idempotent-task.options.js';
export { IdempotentTasks } from './tasks/idempotent-tasks.service.js';
export { currentTick, type TaskTick } from './tasks/task-tick.js';
export {
  IdempotentTaskNameTakenError,
  IdempotentTaskPeriodError,
  IdempotentTaskOverrideError,
  IdempotentTaskUnboundError,
  IdempotentTaskUnscheduledError,
} from './tasks/task-errors.js';
export {
  IdempotentJobUnboundError,
  JobAnswerRefusedError,
  JobKeyUnusableError,
  JobMoveInPhaseError,
  JobQueueStoreUnreadableError,
  JobRefusedError,
  JobResultTooLargeError,
  JobResultUnstorableError,
} from './jobs/job-errors.js';
export {
  type CallRecord,
  type ExternalCall,
  PhaseOrderError,
  PhaseRunner,
  PhasesNeedTransactionalStoreError,
  type PhaseContext,
  type PhaseWork,
} from './phases/phase-runner.service.js';
export { IdempotentTransaction } from './idempotent-transaction.service.js';
export { TransactionEndedError } from './data-layers/lazy-transaction.js';
export { SavepointAcrossRunnersError } from './data-layers/runner-savepoints.js';
export {
  ConcurrentSaveFailedError,
  CursorOpenRefusedError,
  SubscriberTransactionOpenError,
  StatementBesidePhaseRefusedError,
  IsolationLevelRefusedError,
  NestedTransactionOpenAtCommitError,
  NestedTurnTimeoutError,
  ReadOnlyTransactionRefusedError,
  ReleasedClientError,
  RetriedTryStatementError,
  RunnerConnectedOutsideRequestError,
  ClientTakenElsewhereError,
  KeptClientCommittedElsewhereError,
  KeptClientTransactionGoneError,
  SessionSetBeforeHandlerError,
  NestedFirstPhaseError,
  ListenAmongStatementsRefusedError,
  SessionAdvisoryLockRefusedError,
  SessionSettingRefusedError,
  StatementBesideNestedTransactionError,
  TransactionControlRefusedError,
  UnreadableStatementRefusedError,
} from './transaction/seam-errors.js';
export { type IsolationLevel } from './transaction/isolation-level.js';
export { keepPrismaBatchesPerRequest } from './data-layers/prisma/scoped-batches.js';
export { PrismaBatchingUnknownError } from './data-layers/prisma/prisma-batching-unknown.error.js';
export { PhaseResponse, respond } from './phases/phase-response.js';
export { derivedKey } from './phases/phases.js';
export { ProcessedMessages, type DeliveryOutcome } from './processed-messages.service.js';
export { IdempotencyPurger } from './idempotency-purger.service.js';
export type {
  IdempotencyModuleBaseOptions,
  IdempotencyModuleOptions,
  IdempotencyRouteOptions,
  IdempotencyRequest,
  PoolerMode,
  TenantId,
  TenantScope,
} from './shapes/idempotency-options.interface.js';
export { type IdempotencyKeySource } from './decisions/key-source.js';
export { InvalidIdempotencyOptionsError } from './idempotency-options.js';
export {
  IdempotencyError,
  type IdempotencyErrorCode,
  IdempotencyKeyInProgressError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyMismatchError,
  IdempotencyKeyMissingError,
  IdempotencyLeaseLostError,
  IdempotencyStoreUnavailableError,
  IdempotencyStoreMisconfiguredError,
  IdempotencyRequestInvalidError,
  IdempotencyTenantInvalidError,
  IdempotencyResponseTooLargeError,
  IdempotencyStoredResponseUnreadableError,
  IdempotencyTransactionAbortedError,
  IdempotencyCursorOpenError,
  IdempotencySubscriberTransactionOpenError,
  IdempotencyRunnerConnectedOutsideRequestError,
  IdempotencyStatementBesidePhaseError,
  IdempotencyHandlerRetriedInsideError,
  IdempotencyPhaseNameInvalidError,
  RetryLaterError,
  TransientDatabaseError,
  PermanentDatabaseError,
} from './shapes/idempotency.errors.js';
export { IdempotencySchemaMissingError } from './schema/schema-missing.error.js';
export { DetachedWorkRolledBackError } from './http/settle-detached.js';
export {
  type Problem,
  PROBLEM_CONTENT_TYPE,
  type ProblemRenderer,
  type RenderedProblem,
  toProblem,
} from './http/problem.js';
export { IdempotencyErrorFilter } from './http/idempotency-error.filter.js';
export { IDEMPOTENCY_CHANNELS, type IdempotencyEvent } from './events/idempotency-events.js';
export {
  type MultiHostUrl,
  parseMultiHostUrl,
  postgresConnection,
  type PostgresConnectionOptions,
  writableHostClient,
} from './connection/writable-host.js';
export {
  CONNECTION_STRING_PARAMETERS,
  type HostPort,
  InvalidConnectionStringError,
} from './connection/connection-string.js';
export { parseIdempotencyKey, type KeyParseResult } from './decisions/idempotency-key.js';
export { computeFingerprint, type FingerprintInput } from './fingerprint/fingerprint.js';
export {
  canonicalizeJsonText,
  canonicalizeValue,
  InvalidJsonError,
} from './fingerprint/canonical-json.js';
export { decide, type Decision, type ExistingKey, type Fence } from './decisions/decide.js';
export { type StoredResponse } from './shapes/stored-response.js';
export {
  ClaimStore,
  type ClaimOutcome,
  type KeyScope,
  type TransactionalClaimStore,
} from './shapes/claim-store.interface.js';
export { ClaimStores } from './claim-stores.js';
export { ForwardingClaimStore } from './claim/forwarding-claim.store.js';
export { type ResponseBodyStore } from './shapes/response-body-store.interface.js';
export { PostgresBodyStore } from './answer/bodies/postgres-body.store.js';
export { type BodyPointer } from './answer/bodies/body-pointer.js';
export { IdempotencyDatabase } from './data-layers/idempotency-database.js';
export { IdempotencyKeyEntity } from './schema/idempotency-key.entity.js';
export {
  IDEMPOTENCY_MIGRATIONS,
  PartitionIdempotencyKeys1764461600000,
  PinPartitionFunctions1764461800000,
} from './migrations.js';
export {
  PartitionedPostgresClaimStore,
  type PartitionLayout,
} from './claim/partitioned/partitioned-postgres-claim.store.js';
export * as constants from './shapes/idempotency.constants.js';
