import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';

export type ChargeStatus = 'pending' | 'succeeded' | 'declined' | 'failed';

@Entity({ name: 'charges' })
export class Charge {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column({ name: 'tenant_id', type: 'bigint' })
  tenantId!: string;

  @Column({ type: 'int' })
  amount!: number;

  @Column({ type: 'text' })
  currency!: string;

  @Column({ type: 'text' })
  customer!: string;

  @Column({ type: 'text' })
  status!: ChargeStatus;

  @Column({ name: 'psp_authorization', type: 'text', nullable: true })
  pspAuthorization!: string | null;

  @Column({ name: 'amount_refunded', type: 'bigint', default: 0 })
  amountRefunded!: string;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt!: Date;
}

@Entity({ name: 'refunds' })
export class Refund {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column({ name: 'tenant_id', type: 'bigint' })
  tenantId!: string;

  @Column({ name: 'charge_id', type: 'uuid' })
  chargeId!: string;

  @Column({ name: 'event_id', type: 'text' })
  eventId!: string;

  @Column({ type: 'bigint' })
  amount!: string;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt!: Date;
}

/** A charge as the API shows it. */
export function chargeView(charge: Charge) {
  return {
    id: charge.id,
    amount: charge.amount,
    currency: charge.currency,
    customer: charge.customer,
    status: charge.status,
    psp_authorization: charge.pspAuthorization,
    amount_refunded: Number(charge.amountRefunded),
  };
}
