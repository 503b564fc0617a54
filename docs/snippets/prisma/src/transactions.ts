import { Injectable } from '@nestjs/common';
import { PrismaService } from './prisma.service.js';

@Injectable()
export class TransactionForms {
  constructor(private readonly prisma: PrismaService) {}

  async forms(sku: string) {
    // Interactive: BEGIN and COMMIT on the request's connection become a savepoint.
    await this.prisma.$transaction(async (tx) => {
      await tx.order.create({ data: { sku, quantity: 1, status: 'placed' } });
    });
    // The array form: the same (BEGIN, its statements, COMMIT), so the same savepoint.
    await this.prisma.$transaction([
      this.prisma.order.create({ data: { sku, quantity: 1, status: 'placed' } }),
      this.prisma.order.count({ where: { sku } }),
    ]);
    // A nested transaction that throws rolls back alone; the request goes on.
    await this.prisma
      .$transaction(async (tx) => {
        await tx.order.create({ data: { sku, quantity: 1, status: 'placed' } });
        throw new Error('given up');
      })
      .catch(() => undefined);
  }

  // As the handler's first database work, the level is the request transaction's.
  countSerializable(sku: string) {
    return this.prisma.$transaction((tx) => tx.order.count({ where: { sku } }), {
      isolationLevel: 'Serializable',
    });
  }
}
