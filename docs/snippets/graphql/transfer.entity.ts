// src/transfer.entity.ts
import { Field, Int, ObjectType } from '@nestjs/graphql';
import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity('transfers')
@ObjectType()
export class Transfer {
  @PrimaryGeneratedColumn()
  @Field(() => Int)
  id!: number;

  @Column()
  @Field(() => Int)
  amount!: number;

  @Column()
  @Field()
  to!: string;
}
