import { Injectable } from '@nestjs/common';

/** A payment provider's client: each call carries an idempotency key of the provider's. */
@Injectable()
export class PspClient {
  async authorize(charge: { amount: number }, idempotencyKey: string): Promise<{ id: string }> {
    const response = await fetch(`${process.env.PSP_URL}/authorizations`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: JSON.stringify(charge),
    });
    return (await response.json()) as { id: string };
  }
}
