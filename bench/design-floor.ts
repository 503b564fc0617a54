import { Body, ConflictException, Controller, Headers, HttpCode, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { createHash } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import type { DataSource } from 'typeorm';

interface OrderBody {
  amount: number;
  customer: string;
}

/**
 * The design's floor, written by hand: the least that any implementation of "claim the key,
 * committed on its own, then the work and its stored answer in one transaction" sends to
 * PostgreSQL for a new key, on this machine. Three round trips on one connection: the claim
 * (a named statement, its own commit); `BEGIN` with the handler's INSERT (one simple-protocol
 * message); the stored answer with `COMMIT` (one more). No interceptor, no fingerprint of the
 * body, no lease renewal, no deadline, no response hold, no replay cache, no error handling:
 * not a usable route, only the price of the design's round trips and commits. Its ratio to the
 * plain route is the most the library could reach here; the library's ratio to it is what the
 * library's own code costs.
 */
@Controller()
export class DesignFloorController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('floor')
  @HttpCode(201)
  async floor(@Body() body: OrderBody, @Headers('idempotency-key') key: string) {
    const pool = (this.dataSource.driver as unknown as { master: Pool }).master;
    const client: PoolClient = await pool.connect();
    try {
      const fingerprint = createHash('sha256').update(key).digest();
      const claimed = await client.query<{ claim_id: string; lock_version: string }>({
        name: 'bench_floor_claim',
        text:
          'INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until) ' +
          "VALUES ('floor', $1, $2, now() + interval '5 seconds') " +
          'ON CONFLICT (tenant_id, key) DO NOTHING RETURNING claim_id, lock_version',
        values: [key, fingerprint],
      });
      if (claimed.rowCount !== 1) throw new ConflictException();
      const { claim_id: claimId, lock_version: lockVersion } = claimed.rows[0];
      const literal = (value: string) => client.escapeLiteral(value);
      // Values in the text: the simple protocol carries BEGIN and the INSERT in one message.
      const [, inserted] = (await client.query(
        `BEGIN; INSERT INTO bench_orders (amount, customer) VALUES (${Math.trunc(body.amount)}, ` +
          `${literal(String(body.customer))}) RETURNING id, created_at`,
      )) as unknown as [unknown, { rows: { id: string }[] }];
      const answer = {
        id: inserted.rows[0].id,
        amount: body.amount,
        customer: body.customer,
        status: 'created',
      };
      await client.query(
        "UPDATE idempotency_keys SET state = 'done', response_code = 201, " +
          `response_body = convert_to(${literal(JSON.stringify(answer))}, 'UTF8'), ` +
          `recovery_point = 'finished', locked_until = NULL, finished_at = now() ` +
          `WHERE tenant_id = 'floor' AND key = ${literal(key)} ` +
          `AND claim_id = ${literal(claimId)} AND lock_version = ${Number(lockVersion)}; COMMIT`,
      );
      return answer;
    } finally {
      client.release();
    }
  }

  /**
   * The floor of the design's one-commit lever (`oneCommit`): the claim sent with `BEGIN` (one
   * round trip), the handler's INSERT, the stored answer with `COMMIT`: three round trips and
   * one commit per new key. A duplicate would wait on the uncommitted claim.
   */
  @Post('floor-one')
  @HttpCode(201)
  async floorOne(@Body() body: OrderBody, @Headers('idempotency-key') key: string) {
    const pool = (this.dataSource.driver as unknown as { master: Pool }).master;
    const client: PoolClient = await pool.connect();
    try {
      const fingerprint = createHash('sha256').update(key).digest('hex');
      const literal = (value: string) => client.escapeLiteral(value);
      const [, claimed] = (await client.query(
        'BEGIN; INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until) ' +
          `VALUES ('floor', ${literal(key)}, '\\x${fingerprint}'::bytea, ` +
          "now() + interval '5 seconds') ON CONFLICT (tenant_id, key) DO NOTHING " +
          'RETURNING claim_id, lock_version',
      )) as unknown as [unknown, { rows: { claim_id: string; lock_version: string }[] }];
      if (claimed.rows.length !== 1) {
        await client.query('ROLLBACK');
        throw new ConflictException();
      }
      const { claim_id: claimId, lock_version: lockVersion } = claimed.rows[0];
      const inserted = await client.query<{ id: string }>(
        'INSERT INTO bench_orders (amount, customer) VALUES ($1, $2) RETURNING id, created_at',
        [Math.trunc(body.amount), String(body.customer)],
      );
      const answer = {
        id: inserted.rows[0].id,
        amount: body.amount,
        customer: body.customer,
        status: 'created',
      };
      await client.query(
        "UPDATE idempotency_keys SET state = 'done', response_code = 201, " +
          `response_body = convert_to(${literal(JSON.stringify(answer))}, 'UTF8'), ` +
          `recovery_point = 'finished', locked_until = NULL, finished_at = now() ` +
          `WHERE tenant_id = 'floor' AND key = ${literal(key)} ` +
          `AND claim_id = ${literal(claimId)} AND lock_version = ${Number(lockVersion)}; COMMIT`,
      );
      return answer;
    } finally {
      client.release();
    }
  }
}
