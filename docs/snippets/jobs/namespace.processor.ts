import { Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job } from 'bullmq';
import { IdempotentJob } from 'nestjs-idempotency-pg';

@Processor('emails')
export class BillingEmails extends WorkerHost {
  @IdempotentJob({ namespace: 'billing' }) // tenant bullmq:billing:emails:ns:
  async process(job: Job<{ userId: number }>) {
    return { sent: job.data.userId };
  }
}
