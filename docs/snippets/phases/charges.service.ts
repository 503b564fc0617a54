import { Injectable } from '@nestjs/common';
import { PhaseRunner } from 'nestjs-idempotency-pg';
import { Charge } from './charge.entity.js';
import { PspClient } from './psp.client.js';

export interface CreateChargeDto {
  amount: number;
}

@Injectable()
export class ChargesService {
  constructor(
    private readonly phases: PhaseRunner,
    private readonly psp: PspClient,
  ) {}

  async create(dto: CreateChargeDto) {
    // 1. Local effects only; the result is stored with the recovery point.
    const { chargeId } = await this.phases.run('charge_created', async (manager) => {
      const { identifiers } = await manager.insert(Charge, { ...dto, status: 'pending' });
      return { chargeId: identifiers[0].id as string };
    });

    // 2. The external call, with the key derived from ours and no transaction open; then its
    //    result, recorded in a short transaction with the recovery point.
    const auth = await this.phases.call(
      'psp_authorized',
      ({ idempotencyKey }) => this.psp.authorize(dto, idempotencyKey),
      async (manager, result) => {
        await manager.update(Charge, chargeId, { authorization: result.id });
        return { authorizationId: result.id };
      },
    );

    // 3. The last effect and the response commit together.
    return this.phases.finish(async (manager) => {
      await manager.update(Charge, chargeId, { status: 'succeeded' });
      return { id: chargeId, authorization: auth.authorizationId };
      // or: return respond(402, { error: 'card_declined' });
    });
  }
}
