import { Column, CreateDateColumn, Entity, PrimaryColumn } from 'typeorm';

/**
 * The `idempotency_keys` row, for apps that want to inspect keys through TypeORM (an admin
 * page, a support tool). The request path does not use it; register it in your DataSource's
 * `entities` only if you need it. The schema comes from the migration, never `synchronize`.
 */
@Entity({ name: 'idempotency_keys', synchronize: false })
export class IdempotencyKeyEntity {
  @PrimaryColumn({ name: 'tenant_id', type: 'text' })
  tenantId!: string;

  @PrimaryColumn({ type: 'text' })
  key!: string;

  @Column({ type: 'bytea' })
  fingerprint!: Buffer;

  @Column({ type: 'text' })
  state!: 'started' | 'done';

  @Column({ name: 'recovery_point', type: 'text' })
  recoveryPoint!: string;

  @Column({ name: 'locked_until', type: 'timestamptz', nullable: true })
  lockedUntil!: Date | null;

  @Column({ name: 'lock_version', type: 'bigint' })
  lockVersion!: string;

  @Column({ name: 'response_code', type: 'int', nullable: true })
  responseCode!: number | null;

  @Column({ name: 'response_body', type: 'bytea', nullable: true })
  responseBody!: Buffer | null;

  @Column({ name: 'response_headers', type: 'jsonb', nullable: true })
  responseHeaders!: Record<string, string> | null;

  @Column({ name: 'claim_id', type: 'uuid' })
  claimId!: string;

  @Column({ name: 'phase_results', type: 'jsonb' })
  phaseResults!: Record<string, unknown>;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt!: Date;

  /** When the response was stored: the retention window counts from here. */
  @Column({ name: 'finished_at', type: 'timestamptz', nullable: true })
  finishedAt!: Date | null;
}
