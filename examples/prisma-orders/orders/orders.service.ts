import { ConflictException, Inject, Injectable, NotFoundException } from '@nestjs/common';
import { PhaseRunner } from '../../../lib/index.js';
import { PrismaService } from '../database/prisma.service.js';
import { WAREHOUSE, WarehouseClient } from '../warehouse/warehouse.client.js';
import { type CreateOrderDto } from './create-order.dto.js';
import { orderView, type OrderView } from './order.view.js';
import { NO_HOOKS, type TestHooks } from './test-hooks.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** What `POST /orders/:id/ship` answers. */
export interface ShippedOrder {
  id: number;
  status: 'shipped';
  trackingNumber: string;
}

@Injectable()
export class OrdersService {
  constructor(
    private readonly prisma: PrismaService,
    private readonly phases: PhaseRunner,
    @Inject(WAREHOUSE) private readonly warehouse: WarehouseClient,
  ) {}

  /**
   * The order and its 'placed' event. On an `@Idempotent()` route both commit with the stored
   * 201, or neither does: the create opens the request's transaction, and `$transaction` is a
   * savepoint of it.
   */
  async place(dto: CreateOrderDto, hooks: TestHooks = NO_HOOKS): Promise<OrderView> {
    const order = await this.prisma.order.create({
      data: { sku: dto.sku, quantity: dto.quantity, status: 'placed' },
    });
    await this.prisma.$transaction(async (tx) => {
      await tx.orderEvent.create({ data: { orderId: order.id, kind: 'placed' } });
    });
    if (hooks.swallow) {
      try {
        // A second 'placed' event: a unique violation, caught as "already there". Not in a
        // nested transaction, so PostgreSQL has aborted the request's transaction.
        await this.prisma.orderEvent.create({ data: { orderId: order.id, kind: 'placed' } });
      } catch {
        // the handler goes on
      }
    }
    if (hooks.holdMs) await sleep(hooks.holdMs);
    return orderView(order);
  }

  async find(id: bigint): Promise<OrderView> {
    const order = await this.prisma.order.findUnique({ where: { id } });
    if (!order) throw new NotFoundException(`There is no order ${id}.`);
    return orderView(order);
  }

  /**
   * Ships an order in atomic phases: 'reserved' marks it; 'shipped' calls the warehouse with
   * the phase's derived key (no transaction open while it waits), then records the tracking
   * number with its recovery point; finish() answers. A retry after a crash resumes after the
   * last phase that committed, and the warehouse sees the same derived key again.
   */
  async ship(id: bigint): Promise<ShippedOrder> {
    const reserved = await this.phases.run('reserved', async () => {
      const order = await this.prisma.order.findUnique({ where: { id } });
      if (!order) throw new NotFoundException(`There is no order ${id}.`);
      if (order.status === 'shipped') {
        throw new ConflictException(`Order ${id} has already shipped.`);
      }
      await this.prisma.order.update({ where: { id }, data: { status: 'reserved' } });
      return { id: Number(order.id), sku: order.sku, quantity: order.quantity };
    });
    const shipment = await this.phases.call(
      'shipped',
      ({ idempotencyKey }) => this.warehouse.ship(reserved, idempotencyKey),
      async (_manager, { trackingNumber }) => {
        await this.prisma.order.update({
          where: { id },
          data: { status: 'shipped', trackingNumber },
        });
        return { trackingNumber };
      },
    );
    return this.phases.finish(async () => ({
      id: reserved.id,
      status: 'shipped' as const,
      trackingNumber: shipment.trackingNumber,
    }));
  }
}
