import { Processor, WorkerHost } from '@nestjs/bullmq';
import { type Job } from 'bullmq';
import { IdempotentJob, PhaseRunner } from 'nestjs-idempotency-pg';

export interface RefundJob {
  refundId: string;
  chargeId: string;
  cents: number;
}

/** The PSP's client, provided by the app (an abstract class is a Nest token). */
export abstract class Psp {
  abstract refund(chargeId: string, cents: number, idempotencyKey: string): Promise<{ id: string }>;
}

@Processor('refunds')
export class RefundsProcessor extends WorkerHost {
  constructor(
    private readonly phases: PhaseRunner,
    private readonly psp: Psp,
  ) {
    super();
  }

  // Keyed by the refund, not by the job: the same refund enqueued twice is refunded once.
  @IdempotentJob({ key: (job) => (job.data as RefundJob).refundId })
  async process(job: Job<RefundJob>) {
    const { chargeId, cents } = job.data;
    // The record commits before the call; the PSP sees one key however often the job runs.
    const refund = await this.phases.call('psp_refunded', ({ idempotencyKey }) =>
      this.psp.refund(chargeId, cents, idempotencyKey),
    );
    return { pspRefundId: refund.id };
  }
}
