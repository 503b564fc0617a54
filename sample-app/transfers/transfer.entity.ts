import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity({ name: 'transfers' })
export class Transfer {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column({ name: 'tenant_id', type: 'bigint' })
  tenantId!: string;

  /** A bigint column: TypeORM reads it as text, so that no value loses precision. */
  @Column({ type: 'bigint' })
  amount!: string;

  @Column({ name: 'from_customer', type: 'text' })
  fromCustomer!: string;

  @Column({ name: 'to_customer', type: 'text' })
  toCustomer!: string;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt!: Date;
}

/** A transfer as the API shows it (the amount a number again: it is at most 99999999). */
export function transferView(transfer: Transfer) {
  return {
    id: transfer.id,
    amount: Number(transfer.amount),
    from: transfer.fromCustomer,
    to: transfer.toCustomer,
  };
}
