import { type ActiveClaim } from '../../shapes/active-claim.js';
import { type StoreDatabase } from '../../shapes/store-database.js';
import {
  type BodyPlacement,
  type ResponseBodyStore,
} from '../../shapes/response-body-store.interface.js';

const PUT_BODY = {
  name: 'idempotency_put_body_v3',
  text: `INSERT INTO idempotency_response_bodies (tenant_id, key, claim_id, body, expires_at)
VALUES ($1, $2, $3, $4, clock_timestamp() + $5 * interval '1 millisecond')
RETURNING id::text AS id`,
};

const GET_BODY = {
  name: 'idempotency_get_body_v1',
  text: `SELECT body FROM idempotency_response_bodies WHERE id = $1`,
};

/**
 * Bodies no key can point at any more. Of a key in `idempotency_keys` (no `expires_at`): its
 * row is gone, purged after its retention, or it never finished because its finish was fenced
 * off or failed after a `put` of its own; the key is matched on its claim id too, so that a
 * body of a key's earlier life (purged, then claimed anew) goes as well. Of a key kept in a
 * store that expires keys on its own: past its `expires_at`, which outlasts that key.
 */
const PURGE_BODIES_BATCH = {
  name: 'idempotency_purge_bodies_v2',
  text: `DELETE FROM idempotency_response_bodies WHERE id IN (
  SELECT b.id FROM idempotency_response_bodies b
  WHERE b.created_at < now() - $1 * interval '1 millisecond'
    AND CASE WHEN b.expires_at IS NULL
      THEN NOT EXISTS (SELECT 1 FROM idempotency_keys k
        WHERE k.tenant_id = b.tenant_id AND k.key = b.key AND k.claim_id = b.claim_id)
      ELSE b.expires_at < now() END
  LIMIT $2 FOR UPDATE SKIP LOCKED)`,
};

/**
 * The body store that needs nothing new: a side table of the app's PostgreSQL
 * (`idempotency_response_bodies`), written in the transaction that finishes the key.
 */
export class PostgresBodyStore implements ResponseBodyStore {
  readonly transactional = true;

  constructor(private readonly database: StoreDatabase) {}

  async put(claim: ActiveClaim, body: Buffer, placement: BodyPlacement = {}): Promise<string> {
    const { transaction, keepMs } = placement;
    const values = [claim.tenantId, claim.key, claim.claimId, body, keepMs ?? null];
    const rows = transaction
      ? await transaction.query<{ id: string }>(PUT_BODY.text, values)
      : (await this.database.query<{ id: string }>(PUT_BODY, values)).rows;
    return rows[0].id;
  }

  async get(id: string): Promise<Buffer | undefined> {
    if (!/^[0-9a-f-]{36}$/i.test(id)) return undefined;
    const { rows } = await this.database.query<{ body: Buffer }>(GET_BODY, [id]);
    return rows[0]?.body;
  }

  async purgeBatch(retentionMs: number, batchSize: number): Promise<number> {
    const { rowCount } = await this.database.query(PURGE_BODIES_BATCH, [retentionMs, batchSize]);
    return rowCount ?? 0;
  }
}
