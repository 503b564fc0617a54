import { partitionOwnerRemedy, type StrandedPartition } from './partition-owner-remedy.js';

const part = (name: string, owner: string, more: Partial<StrandedPartition> = {}) => ({
  name,
  owner,
  schema: 'public',
  keysOwnerMayCreate: true,
  mayNotGive: [],
  ...more,
});

describe('partitionOwnerRemedy', () => {
  // Every role that may make partitions may give them: the GRANT (where it is needed) is all,
  // the app's sessions give them when they next make partitions.
  it.each<[string, StrandedPartition[], string]>([
    [
      'the owner without CREATE: the GRANT alone, the statements ending at " (PostgreSQL"',
      [part('public.p1', 'api', { keysOwnerMayCreate: false }), part('public.p2', 'api')],
      "GRANT CREATE ON SCHEMA public TO migrator (PostgreSQL asks it of a table's new owner), " +
        'after which the app gives them to it when it next makes partitions (each role that ' +
        'may make partitions here may give them)',
    ],
    [
      'the owner with CREATE: an earlier release’s, given on the next run',
      [part('public.p1', 'api')],
      "the app gives them to it when it next makes partitions (these are an earlier release's), " +
        'or ALTER TABLE ... OWNER TO migrator',
    ],
  ])('the app gives them: %s', (_name, stranded, remedy) => {
    expect(partitionOwnerRemedy('migrator', stranded)).toBe(remedy);
  });

  // A role that may make partitions but not give these (a rotated credential, a second app):
  // the app may never give them, so each is stated by hand, after the GRANT it needs.
  it.each<[string, StrandedPartition[], string]>([
    [
      'credentials rotated, the owner without CREATE: the GRANT, then each ALTER, in one paste',
      [
        part('public.p2', 'api_v1', { keysOwnerMayCreate: false, mayNotGive: ['api_v2'] }),
        part('public.p1', 'api_v1', { keysOwnerMayCreate: false, mayNotGive: ['api_v2'] }),
      ],
      'GRANT CREATE ON SCHEMA public TO migrator; ALTER TABLE public.p1 OWNER TO migrator; ' +
        "ALTER TABLE public.p2 OWNER TO migrator (PostgreSQL asks the CREATE of a table's new " +
        "owner; run them as a superuser, or the GRANT as the schema's owner and the ALTERs as " +
        'api_v1; for every object of that role in this database at once, as a rotated role ' +
        'needs before it is dropped: REASSIGN OWNED BY api_v1 TO migrator). Only sessions of a ' +
        "partition's owner may give it, and api_v2 may make partitions but not give these: an " +
        'app logging in as it (credentials rotated to a new role, a second app role) never ' +
        'gives them',
    ],
    [
      'the owner with CREATE, one of two given by hand, the other by the app',
      [part('public.p1', 'api', { mayNotGive: ['jobs', 'migrator'] }), part('public.p2', 'jobs')],
      'ALTER TABLE public.p1 OWNER TO migrator (as a superuser or as api; for every object of ' +
        'that role in this database at once, as a rotated role needs before it is dropped: ' +
        "REASSIGN OWNED BY api TO migrator). Only sessions of a partition's owner may give it, " +
        'and jobs and migrator may make partitions but not give this one: an app logging in as ' +
        'one of them (credentials rotated to a new role, a second app role) never gives it; ' +
        'the app gives the other 1 when it next makes partitions',
    ],
    [
      'two makers: each ALTER as its partition’s owner',
      [
        part('public.p2', 'worker', { mayNotGive: ['api'] }),
        part('public.p1', 'api', { mayNotGive: ['worker'] }),
      ],
      'ALTER TABLE public.p1 OWNER TO migrator; ALTER TABLE public.p2 OWNER TO migrator (as a ' +
        "superuser or each as its partition's owner (api and worker); for every object of " +
        'those roles in this database at once, as a rotated role needs before it is dropped: ' +
        "REASSIGN OWNED BY api, worker TO migrator). Only sessions of a partition's owner may " +
        'give it, and api and worker may make partitions but not give these: an app logging in ' +
        'as one of them (credentials rotated to a new role, a second app role) never gives them',
    ],
  ])('stated by hand: %s', (_name, stranded, remedy) => {
    expect(partitionOwnerRemedy('migrator', stranded)).toBe(remedy);
  });

  // The statements are pasted as printed: a name SQL would not read bare is quoted in them
  // (the partitions' names come quoted from the catalog).
  it.each<[string, string, StrandedPartition[], string]>([
    [
      'an owner with a dash, in the GRANT',
      'idem-owner',
      [part('public.p1', 'api', { keysOwnerMayCreate: false })],
      'GRANT CREATE ON SCHEMA public TO "idem-owner" (',
    ],
    [
      'a schema with capitals, in the GRANT',
      'migrator',
      [part('"Idem".p1', 'api', { schema: 'Idem', keysOwnerMayCreate: false })],
      'GRANT CREATE ON SCHEMA "Idem" TO migrator (',
    ],
    [
      'an owner with capitals and a quote, in the ALTER',
      'Mi"grator',
      [part('public.p1', 'api')],
      'ALTER TABLE ... OWNER TO "Mi""grator"',
    ],
    [
      'a maker with capitals, in the REASSIGN; the partition as read',
      'migrator',
      [part('"Api".p1', 'Api_v1', { mayNotGive: ['api_v2'] })],
      'ALTER TABLE "Api".p1 OWNER TO migrator (as a superuser or as Api_v1; for every object of ' +
        'that role in this database at once, as a rotated role needs before it is dropped: ' +
        'REASSIGN OWNED BY "Api_v1" TO migrator)',
    ],
  ])('quotes the names its statements need quoted: %s', (_name, keysOwner, stranded, sql) => {
    expect(partitionOwnerRemedy(keysOwner, stranded)).toContain(sql);
  });
});
