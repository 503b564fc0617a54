import { Injectable } from '@nestjs/common';
import { PhaseRunner } from 'nestjs-idempotency-pg';
import { PrismaService } from './prisma.service.js';

@Injectable()
export class ShippingService {
  constructor(
    private readonly prisma: PrismaService,
    private readonly phases: PhaseRunner,
  ) {}

  async ship(id: bigint) {
    // Each phase's Prisma writes commit with its recovery point. The first argument is
    // TypeORM's EntityManager: not for a Prisma app, so it is left unused.
    const order = await this.phases.run('reserved', async () => {
      const row = await this.prisma.order.update({ where: { id }, data: { status: 'reserved' } });
      return { sku: row.sku, quantity: row.quantity };
    });
    // The warehouse is called with no transaction open, with a key derived from the client's:
    // a retry after a crash calls it again with the same key.
    const { trackingNumber } = await this.phases.call(
      'shipped',
      ({ idempotencyKey }) => this.callWarehouse(order, idempotencyKey),
      async (_manager, shipment) => {
        await this.prisma.order.update({
          where: { id },
          data: { status: 'shipped', trackingNumber: shipment.trackingNumber },
        });
        return shipment;
      },
    );
    return this.phases.finish(async () => ({ id: Number(id), status: 'shipped', trackingNumber }));
  }

  private async callWarehouse(order: { sku: string; quantity: number }, key: string) {
    const res = await fetch(`${process.env.WAREHOUSE_URL}/shipments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(order),
    });
    return (await res.json()) as { trackingNumber: string };
  }
}
