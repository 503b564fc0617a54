import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity('refunds')
export class Refund {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column('text')
  chargeId!: string;

  @Column('integer')
  amount!: number;
}
