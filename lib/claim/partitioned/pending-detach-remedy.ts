/**
 * What the owner of a partition left pending detach runs to be rid of it: finish the detach,
 * then drop the table. A purge stopped during its `DETACH ... CONCURRENTLY` leaves the
 * partition pending; the purge of a role that may drop it finishes and drops it, but one owned
 * by another role (its maker, where it could not be given to the keys table's owner) is left
 * alone by every other role's purge (finished, it could not be dropped, and nothing would look
 * at it again). Meanwhile PostgreSQL detaches no other partition of the table `CONCURRENTLY`.
 *
 * Both names come with their schema, quoted as SQL takes them (`quote_ident`, read from the
 * catalog): the operator's session need not have the app's search path, and the partition may
 * sit in another schema than the keys table.
 *
 * @example
 * pendingDetachRemedy('public.idempotency_keys', 'public.idempotency_keys_20261207t01');
 * // 'ALTER TABLE public.idempotency_keys DETACH PARTITION public.idempotency_keys_20261207t01
 * //  FINALIZE; DROP TABLE public.idempotency_keys_20261207t01'
 */
export function pendingDetachRemedy(keysTable: string, partition: string): string {
  return `ALTER TABLE ${keysTable} DETACH PARTITION ${partition} FINALIZE; DROP TABLE ${partition}`;
}
