import { Injectable } from '@nestjs/common';
import { PrismaService } from './prisma.service.js';

@Injectable()
export class OrdersService {
  constructor(private readonly prisma: PrismaService) {}

  // On an @Idempotent() route: the order, its event and the stored 201 commit together.
  async place(sku: string, quantity: number) {
    const order = await this.prisma.order.create({ data: { sku, quantity, status: 'placed' } });
    // Prisma's own transaction: a savepoint of the request's transaction.
    await this.prisma.$transaction(async (tx) => {
      await tx.orderEvent.create({ data: { orderId: order.id, kind: 'placed' } });
    });
    return { id: Number(order.id), sku, quantity, status: 'placed' };
  }
}
