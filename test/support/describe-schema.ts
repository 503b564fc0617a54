import { Client } from 'pg';

/** Columns, constraints and indexes of the library's tables, as PostgreSQL describes them. */
export async function describeSchema(url: string) {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    const tables = ['idempotency_keys', 'processed_messages', 'message_failures'];
    const columns = await client.query(
      `SELECT table_name, column_name, data_type, is_nullable, column_default
       FROM information_schema.columns WHERE table_name = ANY($1)
       ORDER BY table_name, column_name`,
      [tables],
    );
    const constraints = await client.query(
      `SELECT conrelid::regclass::text AS table_name, contype, pg_get_constraintdef(oid) AS def
       FROM pg_constraint WHERE conrelid::regclass::text = ANY($1)
       ORDER BY table_name, contype, def`,
      [tables],
    );
    const indexes = await client.query(
      `SELECT tablename, indexname, indexdef FROM pg_indexes WHERE tablename = ANY($1)
       ORDER BY tablename, indexname`,
      [tables],
    );
    const options = await client.query(
      `SELECT relname, reloptions FROM pg_class WHERE relname = ANY($1) ORDER BY relname`,
      [tables],
    );
    return {
      columns: columns.rows,
      constraints: constraints.rows,
      // Primary keys are named after the table by PostgreSQL either way.
      indexes: indexes.rows,
      options: options.rows,
    };
  } finally {
    await client.end();
  }
}
