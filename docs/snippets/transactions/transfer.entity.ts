import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity('transfers')
export class Transfer {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column('text')
  from!: string;

  @Column('text')
  to!: string;

  @Column('integer')
  amount!: number;
}
