import { Body, Controller, Post } from '@nestjs/common';
import { Idempotent, RetryLaterError } from '../../../lib/index.js';
import { PrismaService } from '../../../examples/prisma-orders/database/prisma.service.js';

/**
 * Routes of the Prisma e2e suite only, added to the orders example: each drives one of
 * Prisma's transaction APIs inside an `@Idempotent()` request.
 */
export interface ProbeBody {
  sku: string;
  /** `fail-after`: which of Prisma's transaction forms writes before the failure. */
  form?: 'interactive' | 'array';
  /** `write-skew`: how long to wait between the read and the write. */
  waitMs?: number;
  /** `write-skew`: the isolation level its $transaction asks for. */
  level?: 'Serializable' | 'ReadCommitted';
  /** `tx-timeout`: catch Prisma's error and answer anyway. */
  goOn?: boolean;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const order = (sku: string) => ({ data: { sku, quantity: 1, status: 'placed' } });
type Level = { transaction_isolation: string }[];

/** Skus whose fail-after request already failed once (its retry succeeds). */
const failedOnce = new Set<string>();
/** What the handler of each sku caught from Prisma (its name, and its message or code). */
export const caughtBySku = new Map<string, { name: string; message: string }>();

@Controller('probes')
export class PrismaProbesController {
  constructor(private readonly prisma: PrismaService) {}

  /** A nested $transaction that throws, caught: it rolls back alone; the rest commits. */
  @Post('nested-caught')
  @Idempotent()
  async nestedCaught(@Body() body: ProbeBody) {
    const { id } = await this.prisma.order.create(order(body.sku));
    try {
      await this.prisma.$transaction(async (tx) => {
        await tx.orderEvent.create({ data: { orderId: id, kind: 'placed' } });
        throw new Error('the nested work gave up');
      });
    } catch {
      // the savepoint rolled back; the request goes on
    }
    await this.prisma.orderEvent.create({ data: { orderId: id, kind: 'kept' } });
    return { id: Number(id) };
  }

  /** Writes through one of Prisma's transaction forms, then fails (503) the first time. */
  @Post('fail-after')
  @Idempotent()
  async failAfter(@Body() body: ProbeBody) {
    if (body.form === 'array') {
      await this.prisma.$transaction([
        this.prisma.order.create(order(body.sku)),
        this.prisma.order.create(order(body.sku)),
      ]);
    } else {
      await this.prisma.$transaction(async (tx) => {
        const { id } = await tx.order.create(order(body.sku));
        await tx.orderEvent.create({ data: { orderId: id, kind: 'placed' } });
      });
    }
    if (!failedOnce.has(body.sku)) {
      failedOnce.add(body.sku);
      throw new RetryLaterError('the downstream system is down', 1);
    }
    return { orders: await this.prisma.order.count({ where: { sku: body.sku } }) };
  }

  /** $transaction with an isolation level as the handler's first work: the request's level. */
  @Post('isolation-first')
  @Idempotent()
  async isolationFirst(@Body() body: ProbeBody) {
    const inside = await this.prisma.$transaction(
      async (tx) => {
        const [row] = await tx.$queryRaw<Level>`SHOW transaction_isolation`;
        await tx.order.create(order(body.sku));
        return row.transaction_isolation;
      },
      { isolationLevel: 'Serializable' },
    );
    const [after] = await this.prisma.$queryRaw<Level>`SHOW transaction_isolation`;
    return { inside, after: after.transaction_isolation };
  }

  /** A stronger level asked for after the request's transaction began: refused. */
  @Post('isolation-after-write')
  @Idempotent()
  async isolationAfterWrite(@Body() body: ProbeBody) {
    await this.prisma.order.create(order(body.sku));
    try {
      await this.prisma.$transaction((tx) => tx.order.create(order(body.sku)), {
        isolationLevel: 'Serializable',
      });
    } catch (error) {
      const { name, message } = error as Error;
      caughtBySku.set(body.sku, { name, message });
      throw error;
    }
    return { sku: body.sku };
  }

  /** One order per sku, checked by a read: a write skew unless the level is SERIALIZABLE. */
  @Post('write-skew')
  @Idempotent()
  async writeSkew(@Body() body: ProbeBody) {
    return this.prisma.$transaction(
      async (tx) => {
        const existing = await tx.order.count({ where: { sku: body.sku } });
        await sleep(body.waitMs ?? 0);
        if (existing === 0) await tx.order.create(order(body.sku));
        return { placed: existing === 0 };
      },
      { isolationLevel: body.level ?? 'Serializable', timeout: 10_000 },
    );
  }

  /** Prisma's own timeout of an interactive transaction (here 200 ms) fires mid-request. */
  @Post('tx-timeout')
  @Idempotent()
  async txTimeout(@Body() body: ProbeBody) {
    try {
      await this.prisma.$transaction(
        async (tx) => {
          await tx.order.create(order(body.sku));
          await sleep(body.waitMs ?? 0);
          await tx.order.create(order(body.sku));
        },
        { timeout: 200 },
      );
    } catch (error) {
      const { name, code } = error as Error & { code?: string };
      caughtBySku.set(body.sku, { name, message: String(code) });
      if (!body.goOn) throw error;
    }
    return { orders: await this.prisma.order.count({ where: { sku: body.sku } }) };
  }
}
