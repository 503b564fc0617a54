import { Inject, Injectable } from '@nestjs/common';
import { type Kysely } from 'kysely';
import { PhaseRunner } from 'nestjs-idempotency-pg';
import { type Database, KYSELY } from './database.js';

@Injectable()
export class ShippingService {
  constructor(
    @Inject(KYSELY) private readonly db: Kysely<Database>,
    private readonly phases: PhaseRunner,
  ) {}

  async ship(orderId: string) {
    // A phase's first argument is TypeORM's EntityManager: not for you. Kysely's queries on
    // the module's pool join the phase's transaction, committed with its recovery point.
    await this.phases.run('reserved', async () => {
      await this.db
        .updateTable('orders')
        .set({ status: 'reserved' })
        .where('id', '=', orderId)
        .execute();
      return { reserved: true };
    });

    // The warehouse with the phase's derived key and no transaction open; then its answer,
    // recorded in a short transaction. A takeover calls again with the same key.
    const { trackingNumber } = await this.phases.call(
      'shipped',
      ({ idempotencyKey }) => this.callWarehouse(orderId, idempotencyKey),
      async (_manager, shipment) => {
        await this.db
          .insertInto('order_events')
          .values({ order_id: orderId, kind: 'shipped' })
          .execute();
        return shipment;
      },
    );

    // The last effect and the stored answer, in one commit.
    return this.phases.finish(async () => {
      await this.db
        .updateTable('orders')
        .set({ status: 'shipped' })
        .where('id', '=', orderId)
        .execute();
      return { id: orderId, status: 'shipped', trackingNumber };
    });
  }

  private async callWarehouse(orderId: string, idempotencyKey: string) {
    const response = await fetch('https://warehouse.example/shipments', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: JSON.stringify({ orderId }),
    });
    return (await response.json()) as { trackingNumber: string };
  }
}
