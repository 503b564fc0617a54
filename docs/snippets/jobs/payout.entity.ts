import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity()
export class Payout {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column()
  orderId!: string;

  @Column('int')
  cents!: number;
}
