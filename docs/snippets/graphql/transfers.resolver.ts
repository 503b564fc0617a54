// src/transfers.resolver.ts
import { Args, Int, Mutation, Query, Resolver } from '@nestjs/graphql';
import { InjectRepository } from '@nestjs/typeorm';
import { Idempotent } from 'nestjs-idempotency-pg';
import { Repository } from 'typeorm';
import { Transfer } from './transfer.entity.js';

@Resolver(() => Transfer)
export class TransfersResolver {
  constructor(@InjectRepository(Transfer) private readonly transfers: Repository<Transfer>) {}

  @Query(() => [Transfer])
  recentTransfers() {
    return this.transfers.find({ order: { id: 'DESC' }, take: 10 });
  }

  // The key in the Idempotency-Key header of the HTTP request. Runs once per key and alias:
  // the insert and the stored answer commit together; a retry gets the same answer again.
  @Mutation(() => Transfer)
  @Idempotent()
  createTransfer(
    @Args('amount', { type: () => Int }) amount: number,
    @Args('to') to: string,
  ): Promise<Transfer> {
    return this.transfers.save({ amount, to });
  }

  // The key in an argument: one key per call, several calls in one operation.
  @Mutation(() => Transfer)
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' } })
  sendTransfer(
    @Args('idempotencyKey') _idempotencyKey: string,
    @Args('amount', { type: () => Int }) amount: number,
    @Args('to') to: string,
  ): Promise<Transfer> {
    return this.transfers.save({ amount, to });
  }
}
