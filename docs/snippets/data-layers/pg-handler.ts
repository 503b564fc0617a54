// src/transfers.controller.ts: pg itself, no ORM; every statement joins the request
import { Body, Controller, Inject, Post } from '@nestjs/common';
import { Idempotent } from 'nestjs-idempotency-pg';
import { type Pool } from 'pg';
import { PG_POOL } from './pool.module.js';

@Controller('transfers')
export class TransfersController {
  constructor(@Inject(PG_POOL) private readonly pool: Pool) {}

  @Post()
  @Idempotent()
  async create(@Body() body: { from: string; to: string; amount: number }) {
    // One transaction with the stored answer: BEGIN rides with the first write.
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN'); // a savepoint inside the request's transaction
      await client.query('UPDATE accounts SET balance = balance - $1 WHERE id = $2', [
        body.amount,
        body.from,
      ]);
      await client.query('UPDATE accounts SET balance = balance + $1 WHERE id = $2', [
        body.amount,
        body.to,
      ]);
      await client.query('COMMIT'); // releases the savepoint; the request commits later
    } catch (error) {
      await client.query('ROLLBACK'); // back to the savepoint
      throw error;
    } finally {
      client.release(); // the connection stays the request's until it commits
    }
    const { rows } = await this.pool.query<{ id: string }>(
      'INSERT INTO transfers (from_id, to_id, amount) VALUES ($1, $2, $3) RETURNING id',
      [body.from, body.to, body.amount],
    );
    return { id: rows[0].id };
  }
}
