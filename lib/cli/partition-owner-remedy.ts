import { sqlName } from '../schema/sql-name.js';

/** A partition the keys table's owner may not drop, as the doctor read it. */
export interface StrandedPartition {
  /** Its name with its schema, quoted as SQL takes them (absent: not read). */
  name?: string;
  /** The role that owns it: its maker. */
  owner: string;
  schema: string;
  /** Whether the keys table's owner has CREATE on its schema (if not, the GRANT comes first). */
  keysOwnerMayCreate: boolean;
  /**
   * The roles that may make partitions (they log in, have the keys table's owner's privileges
   * and are no superusers) but may not give this one (they are no members of its owner). An app
   * logging in as one of them never gives it.
   */
  mayNotGive: readonly string[];
}

function joined(names: readonly string[]): string {
  return names.length === 1 ? names[0] : `${names.slice(0, -1).join(', ')} and ${names.at(-1)}`;
}

/**
 * What to run to have the partitions the keys table's owner may not drop given to it, so that
 * any purge drops them. Only a session of a partition's owner (or a superuser) may give it, and
 * only once the keys table's owner has CREATE on its schema (PostgreSQL asks that of a table's
 * new owner). The store gives its role's partitions when it next makes partitions
 * (partition-hand-over.ts), so where every role that may make partitions may give a partition,
 * the GRANT is all it takes. A partition that some such role may not give is stated by hand:
 * the doctor cannot tell which role the app logs in as today, and after credentials are rotated
 * to a new role (or beside a second app role) the maker's sessions may never run again, so
 * "the app gives them" would be a promise nobody keeps (adversary 115). For those the remedy is
 * each partition's `ALTER TABLE ... OWNER TO`, run as a superuser or the maker, or `REASSIGN
 * OWNED BY`, which a rotated role needs before it can be dropped anyway.
 *
 * The statements are pasted as printed, in order (the GRANT before the ALTERs it enables); names
 * quoted where SQL would not read them bare. The GRANT, where there is one, is followed by
 * ` (PostgreSQL`, which tells where the statements end.
 *
 * @example
 * partitionOwnerRemedy('migrator', [
 *   { name: 'public.p1', owner: 'api_v1', schema: 'public', keysOwnerMayCreate: true, mayNotGive: ['api_v2'] },
 * ]);
 * // 'ALTER TABLE public.p1 OWNER TO migrator (as a superuser or as api_v1; ...: REASSIGN OWNED
 * //  BY api_v1 TO migrator). Only sessions of a partition's owner may give it, and api_v2 ...'
 */
export function partitionOwnerRemedy(
  keysOwner: string,
  stranded: readonly StrandedPartition[],
): string {
  const owner = sqlName(keysOwner);
  const schemas = [
    ...new Set(stranded.filter((p) => !p.keysOwnerMayCreate).map((p) => p.schema)),
  ].sort();
  const grant =
    schemas.length > 0
      ? `GRANT CREATE ON SCHEMA ${schemas.map(sqlName).join(', ')} TO ${owner}`
      : undefined;
  const byHand = stranded
    .filter((p) => p.mayNotGive.length > 0)
    .sort((a, b) => a.owner.localeCompare(b.owner) || (a.name ?? '').localeCompare(b.name ?? ''));
  if (byHand.length === 0) {
    return grant !== undefined
      ? `${grant} (PostgreSQL asks it of a table's new owner), after which the app gives them ` +
          'to it when it next makes partitions (each role that may make partitions here may ' +
          'give them)'
      : 'the app gives them to it when it next makes partitions (these are an earlier ' +
          `release's), or ALTER TABLE ... OWNER TO ${owner}`;
  }
  const makers = [...new Set(byHand.map((p) => p.owner))].sort();
  const others = [...new Set(byHand.flatMap((p) => p.mayNotGive))].sort();
  const alters = byHand.map((p) => `ALTER TABLE ${p.name ?? '...'} OWNER TO ${owner}`);
  const statements = [...(grant === undefined ? [] : [grant]), ...alters].join('; ');
  const rest = stranded.length - byHand.length;
  const byMaker =
    makers.length === 1 ? `as ${makers[0]}` : `each as its partition's owner (${joined(makers)})`;
  const how =
    grant === undefined
      ? `as a superuser or ${byMaker}`
      : "PostgreSQL asks the CREATE of a table's new owner; run them as a superuser, or the " +
        `GRANT as the schema's owner and the ALTERs ${byMaker}`;
  return (
    `${statements} (${how}; for every object of ${makers.length === 1 ? 'that role' : 'those roles'} ` +
    'in this database at once, as a rotated role needs before it is dropped: REASSIGN OWNED ' +
    `BY ${makers.map(sqlName).join(', ')} TO ${owner}). Only sessions of a partition's owner ` +
    `may give it, and ${joined(others)} may make partitions but not give ` +
    `${byHand.length === 1 ? 'this one' : 'these'}: an app logging in as ` +
    `${others.length === 1 ? 'it' : 'one of them'} (credentials rotated to a new role, a second ` +
    `app role) never gives ${byHand.length === 1 ? 'it' : 'them'}` +
    (rest === 0 ? '' : `; the app gives the other ${rest} when it next makes partitions`)
  );
}
