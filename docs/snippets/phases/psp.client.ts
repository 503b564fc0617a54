import { Injectable } from '@nestjs/common';

/** A payment provider's client: each call carries an idempotency key of the provider's. */
@Injectable()
export class PspClient {
  async authorize(charge: { amount: number }, idempotencyKey: string): Promise<{ id: string }> {
    const response = await fetch('https://psp.example.com/authorizations', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: JSON.stringify(charge),
    });
    return (await response.json()) as { id: string };
  }
}
