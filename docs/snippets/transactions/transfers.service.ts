import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { Transfer } from './transfer.entity.js';

export interface CreateTransferDto {
  from: string;
  to: string;
  amount: number;
}

@Injectable()
export class TransfersService {
  constructor(@InjectRepository(Transfer) private readonly transfers: Repository<Transfer>) {}

  create(dto: CreateTransferDto) {
    return this.transfers.save(dto); // commits with the stored 201, or not at all
  }
}
