import { Processor, WorkerHost } from '@nestjs/bullmq';
import { InjectRepository } from '@nestjs/typeorm';
import { type Job } from 'bullmq';
import { IdempotentJob } from 'nestjs-idempotency-pg';
import { type Repository } from 'typeorm';
import { Payout } from './payout.entity.js';

export interface PayoutJob {
  orderId: string;
  cents: number;
}

@Processor('payouts')
export class PayoutsProcessor extends WorkerHost {
  constructor(@InjectRepository(Payout) private readonly payouts: Repository<Payout>) {
    super();
  }

  // The job's row and its record commit together: a job that comes back after its work
  // committed completes with this result, and pays nothing again.
  @IdempotentJob()
  async process(job: Job<PayoutJob>) {
    const payout = await this.payouts.save({ orderId: job.data.orderId, cents: job.data.cents });
    return { payoutId: payout.id };
  }
}
