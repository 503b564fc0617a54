import { Inject, Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Repository } from 'typeorm';
import { Transfer, transferView } from './transfer.entity.js';
import { type CreateTransferDto } from './create-transfer.dto.js';

/** Injection token of `TRANSFER_DELAY_MS`, the time `create()` waits after its write. */
export const TRANSFER_DELAY_MS = Symbol('TRANSFER_DELAY_MS');

/**
 * Written as most Nest services are: one write through an ordinary repository, no phases and
 * no transaction code. Making the write and the stored response one is the library's job.
 */
@Injectable()
export class TransfersService {
  constructor(
    @InjectRepository(Transfer) private readonly transfers: Repository<Transfer>,
    @Inject(TRANSFER_DELAY_MS) private readonly delayMs: number,
  ) {}

  async create(tenantId: string, dto: CreateTransferDto) {
    const transfer = await this.transfers.save(
      this.transfers.create({
        tenantId,
        amount: String(dto.amount),
        fromCustomer: dto.from,
        toCustomer: dto.to,
      }),
    );
    // Work that follows the write (a slow call, say): the window in which the tests kill the
    // process, let the global timeout fire, or cut the database.
    if (this.delayMs > 0) await sleep(this.delayMs);
    return transferView(transfer);
  }

  async list(tenantId: string, from: string) {
    const rows = await this.transfers.find({
      where: { tenantId, fromCustomer: from },
      order: { createdAt: 'ASC', id: 'ASC' },
    });
    return rows.map(transferView);
  }
}
