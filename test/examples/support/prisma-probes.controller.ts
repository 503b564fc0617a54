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
  /** `write-skew`: how long to wait, once both requests have read, before the write. */
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
/** The first two requests of a sku meet here; later ones pass at once. */
const readers = new Map<string, { count: number; met: Promise<void>; meet: () => void }>();
function bothRead(sku: string): Promise<void> {
  let entry = readers.get(sku);
  if (!entry) {
    let meet = () => {};
    const met = new Promise<void>((resolve) => (meet = resolve));
    entry = { count: 0, met, meet };
    readers.set(sku, entry);
  }
  if (++entry.count >= 2) entry.meet();
  // Bounded, so that a request whose partner never came fails its test rather than hangs.
  return Promise.race([entry.met, sleep(5000).then(() => undefined)]);
}

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

  /**
   * One order per sku, checked by a read: a write skew unless the level is SERIALIZABLE. The
   * first two requests of a sku both read before either writes (a barrier), then each waits
   * `waitMs` before its write.
   */
  @Post('write-skew')
  @Idempotent()
  async writeSkew(@Body() body: ProbeBody) {
    return this.prisma.$transaction(
      async (tx) => {
        const existing = await tx.order.count({ where: { sku: body.sku } });
        await bothRead(body.sku);
        await sleep(body.waitMs ?? 0);
        if (existing === 0) await tx.order.create(order(body.sku));
        return { placed: existing === 0 };
      },
      { isolationLevel: body.level ?? 'Serializable', timeout: 10_000 },
    );
  }

  /** Writes, waits `waitMs`, writes again: a test ends the connection in between. */
  @Post('write-wait-write')
  @Idempotent()
  async writeWaitWrite(@Body() body: ProbeBody) {
    const { id } = await this.prisma.order.create(order(body.sku));
    await sleep(body.waitMs ?? 0);
    try {
      await this.prisma.orderEvent.create({ data: { orderId: id, kind: 'placed' } });
    } catch (error) {
      const { name, code, message } = error as Error & { code?: string };
      caughtBySku.set(body.sku, { name, message: code ? `${code}: ${message}` : message });
      throw error;
    }
    return { id: Number(id) };
  }

  /** Writes, then a statement that runs long: a test terminates its backend while it runs. */
  @Post('slow-statement')
  @Idempotent()
  async slowStatement(@Body() body: ProbeBody) {
    await this.prisma.order.create(order(body.sku));
    await this.prisma.$queryRaw`SELECT pg_sleep(3)::text AS slept`;
    return { sku: body.sku };
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
