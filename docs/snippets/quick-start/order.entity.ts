// src/order.entity.ts
import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity('orders')
export class Order {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column('text')
  tenant!: string;

  @Column('integer')
  amount!: number;
}
