import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity()
export class Settlement {
  @PrimaryGeneratedColumn()
  id!: number;

  /** The tick's scheduled time: the end of the window it settles. */
  @Column('timestamptz')
  upTo!: Date;
}
