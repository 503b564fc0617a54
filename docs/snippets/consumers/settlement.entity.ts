import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity('settlements')
export class Settlement {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column('text')
  account!: string;

  @Column('integer')
  amount!: number;
}
