import { Inject, Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { type Repository } from 'typeorm';
import { PhaseRunner, respond } from '../../lib/index.js';
import { PSP_CLIENT, type PspClient } from '../psp/psp.client.js';
import { Charge, chargeView } from './charge.entity.js';
import { type CreateChargeDto } from './create-charge.dto.js';

/**
 * The PSP call's phase name: its derived key (`<claim id>:psp_authorized`) is the one the PSP
 * has seen for every charge since the first version of this app.
 */
const PSP_PHASE = 'psp_authorized';

@Injectable()
export class ChargesService {
  constructor(
    private readonly phases: PhaseRunner,
    @Inject(PSP_CLIENT) private readonly psp: PspClient,
    @InjectRepository(Charge) private readonly charges: Repository<Charge>,
  ) {}

  /**
   * The contract's atomic phases: the charge's row, then the PSP's call, whose answer the last
   * phase commits with the response. A worker that takes a crashed request over runs this
   * again: completed phases return their stored results, the first unfinished one runs.
   */
  async create(tenantId: string, dto: CreateChargeDto) {
    // 1. The charge row, committed with the recovery point `charge_created`.
    const { chargeId } = await this.phases.run('charge_created', async (manager) => {
      // insert(), not save(): one INSERT ... RETURNING id, without save()'s change tracking.
      const { identifiers } = await manager.insert(Charge, {
        tenantId,
        amount: dto.amount,
        currency: dto.currency,
        customer: dto.customer,
        status: 'pending',
        pspAuthorization: null,
      });
      return { chargeId: identifiers[0].id as string };
    });

    // 2. The PSP, with a key derived from this claim: a takeover repeats the call, and the PSP
    //    answers it once. The call holds no database connection. Its answer is recorded by the
    //    last phase, with the response (the design's step 5): a worker that crashes before that
    //    commit leaves the key at `charge_created`, and its takeover asks the PSP again.
    const outcome = await this.psp.authorize(
      { amount: dto.amount, currency: dto.currency, customer: dto.customer },
      this.phases.idempotencyKey(PSP_PHASE)!,
    );

    // 3. The PSP's answer, the charge's final status and the response, in one transaction.
    return this.phases.finish(async (manager) => {
      const status =
        outcome.kind === 'authorized'
          ? 'succeeded'
          : outcome.kind === 'declined'
            ? 'declined'
            : 'failed';
      const authorization = outcome.kind === 'authorized' ? outcome.authorizationId : null;
      // The update and the read back in one round trip.
      const [[charge]] = (await manager.query(
        `UPDATE charges SET status = $1, psp_authorization = $3 WHERE id = $2
         RETURNING id, amount, currency, customer, status,
                   psp_authorization AS "pspAuthorization", amount_refunded AS "amountRefunded"`,
        [status, chargeId, authorization],
      )) as [Charge[], number];
      if (outcome.kind === 'declined') {
        return respond(402, {
          error: 'card_declined',
          message: 'The card was declined by the PSP.',
          charge: chargeView(charge),
        });
      }
      if (outcome.kind === 'failed') {
        return respond(502, {
          error: 'psp_unavailable',
          message: `The PSP failed to process the authorization (HTTP ${outcome.pspStatus}).`,
          charge: chargeView(charge),
        });
      }
      const { amount_refunded: _refunded, ...created } = chargeView(charge);
      return created;
    });
  }

  async list(tenantId: string, customer: string) {
    const rows = await this.charges.find({
      where: { tenantId, customer },
      order: { createdAt: 'ASC' },
    });
    return rows.map(chargeView);
  }

  async get(tenantId: string, id: string) {
    const charge = await this.charges.findOneBy({ tenantId, id });
    return charge && chargeView(charge);
  }
}
