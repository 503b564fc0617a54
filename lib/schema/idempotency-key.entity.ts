import { optionalRequire } from '../connection/optional-require.js';

/**
 * TypeORM, when the app has it: the entity is declared with its decorators then, and is a plain
 * class otherwise (an app on Prisma, Drizzle or Kysely installs no TypeORM). TypeORM keeps its
 * entities' metadata in one global store, so the decorators reach the app's DataSource.
 */
const typeorm = optionalRequire<typeof import('typeorm')>('typeorm');

/**
 * The `idempotency_keys` row, for apps that want to inspect keys through TypeORM (an admin
 * page, a support tool). The request path does not use it; register it in your DataSource's
 * `entities` only if you need it. The schema comes from the migration, never `synchronize`.
 */
export class IdempotencyKeyEntity {
  tenantId!: string;

  key!: string;

  fingerprint!: Buffer;

  state!: 'started' | 'done';

  recoveryPoint!: string;

  lockedUntil!: Date | null;

  lockVersion!: string;

  responseCode!: number | null;

  responseBody!: Buffer | null;

  responseHeaders!: Record<string, string> | null;

  claimId!: string;

  phaseResults!: Record<string, unknown>;

  createdAt!: Date;

  /** When the response was stored: the retention window counts from here. */
  finishedAt!: Date | null;

  /** When its current hold began, when a takeover took it (NULL: at `createdAt`). */
  leasedAt!: Date | null;
}

if (typeorm) {
  const { Column, CreateDateColumn, Entity, PrimaryColumn } = typeorm;
  const row = IdempotencyKeyEntity.prototype;
  PrimaryColumn({ name: 'tenant_id', type: 'text' })(row, 'tenantId');
  PrimaryColumn({ type: 'text' })(row, 'key');
  Column({ type: 'bytea' })(row, 'fingerprint');
  Column({ type: 'text' })(row, 'state');
  Column({ name: 'recovery_point', type: 'text' })(row, 'recoveryPoint');
  Column({ name: 'locked_until', type: 'timestamptz', nullable: true })(row, 'lockedUntil');
  Column({ name: 'lock_version', type: 'bigint' })(row, 'lockVersion');
  Column({ name: 'response_code', type: 'int', nullable: true })(row, 'responseCode');
  Column({ name: 'response_body', type: 'bytea', nullable: true })(row, 'responseBody');
  Column({ name: 'response_headers', type: 'jsonb', nullable: true })(row, 'responseHeaders');
  Column({ name: 'claim_id', type: 'uuid' })(row, 'claimId');
  Column({ name: 'phase_results', type: 'jsonb' })(row, 'phaseResults');
  CreateDateColumn({ name: 'created_at', type: 'timestamptz' })(row, 'createdAt');
  Column({ name: 'finished_at', type: 'timestamptz', nullable: true })(row, 'finishedAt');
  Column({ name: 'leased_at', type: 'timestamptz', nullable: true })(row, 'leasedAt');
  Entity({ name: 'idempotency_keys', synchronize: false })(IdempotencyKeyEntity);
}
