import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity('charges')
export class Charge {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column('integer')
  amount!: number;

  @Column('text')
  status!: string;

  @Column('text', { nullable: true })
  authorization?: string;
}
