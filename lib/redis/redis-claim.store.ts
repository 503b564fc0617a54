import { Logger } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { type ExistingKey, type Fence, leaseOf } from '../decisions/decide.js';
import { START_RECOVERY_POINT } from '../shapes/idempotency.constants.js';
import { type ActiveClaim } from '../shapes/active-claim.js';
import { IdempotencyStoreUnavailableError } from '../shapes/idempotency.errors.js';
import {
  type ClaimOutcome,
  type ClaimStore,
  type KeyScope,
} from '../shapes/claim-store.interface.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { withDeadline } from '../connection/deadline.js';
import { type ClockOffset, nextOffset, redisDeadlineMs, UNKNOWN_OFFSET } from './redis-clock.js';
import {
  CLAIM_SCRIPT,
  EXTEND_SCRIPT,
  COMPLETE_ANSWER_SCRIPT,
  FINISH_SCRIPT,
  RELEASE_SCRIPT,
  TAKE_OVER_SCRIPT,
} from './redis-scripts.js';

/** What the store needs of an ioredis client (`Redis` or `Cluster`). */
export interface RedisScriptClient {
  defineCommand(name: string, definition: { numberOfKeys: number; lua: string }): void;
}

/** Options of `RedisClaimStore`. */
export interface RedisClaimStoreOptions {
  /**
   * How long a finished key is kept, in milliseconds: give the module's `retentionMs`.
   * @default 86400000
   */
  retentionMs?: number;
  /**
   * How long an unfinished key is kept: give the module's `abandonedKeyRetentionMs`.
   * @default 2592000000 (30 days)
   */
  abandonedKeyRetentionMs?: number;
  /**
   * Prefix of the store's Redis keys.
   * @default 'idempotency:'
   */
  prefix?: string;
  /**
   * Upper bound on each call, in milliseconds: past it the client gets 503 and nothing runs. A
   * claim or takeover still waiting then (behind a paused server, in ioredis's offline queue)
   * carries this deadline on Redis's clock and does nothing when it runs late.
   * @default 5000
   */
  timeoutMs?: number;
}

type Script = (...args: [string, ...(string | number | Buffer)[]]) => Promise<unknown>;

/** The script names, prefixed so that they never clash with the app's own commands. */
const SCRIPTS = {
  idempotencyClaim: CLAIM_SCRIPT,
  idempotencyTakeOver: TAKE_OVER_SCRIPT,
  idempotencyFinish: FINISH_SCRIPT,
  idempotencyCompleteAnswer: COMPLETE_ANSWER_SCRIPT,
  idempotencyRelease: RELEASE_SCRIPT,
  idempotencyExtend: EXTEND_SCRIPT,
} as const;

/**
 * The claim store on Redis (opt-in, per module or per route): a claim is one script, the
 * decision logic is the same `decide()`, and takeover, finish, release and heartbeat are
 * fenced atomically in Lua. Finished keys expire with the retention window on their own.
 *
 * Its limits: Redis acknowledges a write before it is on disk or on a replica, so a restart
 * without persistence or a failover loses claims, and a retry then runs the handler again;
 * and its records cannot commit in one transaction with the app's PostgreSQL, so it serves
 * only routes with `atomic: false` and no phases. See the README's "Claim stores".
 *
 * @example
 * IdempotencyModule.forRoot({
 *   claimStores: { redis: new RedisClaimStore(new Redis(process.env.REDIS_URL)) },
 * })
 * @Idempotent({ claimStore: 'redis', atomic: false })
 */
export class RedisClaimStore implements ClaimStore {
  readonly transactional = false;
  private readonly logger = new Logger('Idempotency');
  private readonly retentionMs: number;
  /** Its finished keys expire on their own, this long after their finish. */
  readonly expiresKeysAfterMs: number;
  private readonly abandonedMs: number;
  private readonly prefix: string;
  private readonly timeoutMs: number;
  /** Redis's clock against ours, learned from the claims' replies: their deadlines use it. */
  private clock: ClockOffset = UNKNOWN_OFFSET;

  constructor(
    private readonly redis: RedisScriptClient,
    options: RedisClaimStoreOptions = {},
  ) {
    this.retentionMs = options.retentionMs ?? 86_400_000;
    this.expiresKeysAfterMs = this.retentionMs;
    this.abandonedMs = Math.max(options.abandonedKeyRetentionMs ?? 2_592_000_000, this.retentionMs);
    this.prefix = options.prefix ?? 'idempotency:';
    this.timeoutMs = options.timeoutMs ?? 5000;
    for (const [name, lua] of Object.entries(SCRIPTS)) {
      redis.defineCommand(name, { numberOfKeys: 1, lua });
    }
  }

  async claim(scope: KeyScope, fingerprint: Buffer, leaseMs: number): Promise<ClaimOutcome> {
    const claimId = randomUUID();
    const key = this.keyOf(scope);
    const began = Date.now();
    let reply: ClaimReply;
    // A second try only when Redis refused the first as late while its answer came in time:
    // then Redis's clock is ahead of what was known of it, and the reply said by how much.
    for (let attempt = 0; ; attempt++) {
      const left = this.timeoutMs - (Date.now() - began);
      reply = (await this.call(
        'idempotencyClaimBuffer',
        [key, fingerprint, leaseMs, claimId, this.abandonedMs, this.deadline(left)],
        left,
        // Ran, but answered after the 503: a claim that landed is taken back.
        (late) => {
          if (Number((late as ClaimReply)[0]) === 1) {
            void this.call('idempotencyRelease', [key, '0', claimId, '1']).catch(() => undefined);
          }
        },
      )) as ClaimReply;
      this.learn((reply as Buffer[])[reply.length - 1]);
      if (Number(reply[0]) !== -1) break;
      if (attempt === 1 || left <= 0) {
        throw new IdempotencyStoreUnavailableError(
          new Error('Redis refused the claim as past its deadline'),
        );
      }
    }
    if (Number(reply[0]) === 1) {
      return {
        kind: 'claimed',
        claim: {
          ...scope,
          claimId,
          lockVersion: '0',
          recoveryPoint: START_RECOVERY_POINT,
          phaseResults: {},
          leaseMs,
        },
      };
    }
    const [, cid, lv, fp, st, lu, rc, rh, rb, fa, now] = reply as Buffer[];
    const nowMs = Number(now.toString());
    let existing: ExistingKey;
    if (st.toString() === 'done') {
      existing = {
        state: 'done',
        fingerprint: fp,
        response: {
          status: Number(rc.toString()),
          headers: JSON.parse(rh.toString()) as Record<string, string>,
          body: rb,
        },
        finishedAgeMs: nowMs - Number(fa.toString()),
      };
    } else {
      const lockedUntil = Number(lu.toString());
      existing = {
        state: 'started',
        fingerprint: fp,
        ...leaseOf(lockedUntil, nowMs),
        // Given back by its owner (see RELEASE_SCRIPT), not left to expire.
        released: lockedUntil === 0,
        fence: { lockVersion: lv.toString(), claimId: cid.toString() },
      };
    }
    return { kind: 'existing', existing };
  }

  async takeOver(scope: KeyScope, fence: Fence, leaseMs: number) {
    const key = this.keyOf(scope);
    const lockVersion = await this.call(
      'idempotencyTakeOver',
      [key, fence.lockVersion, fence.claimId, leaseMs, this.abandonedMs, this.deadline()],
      this.timeoutMs,
      // Won, but answered after the 503: its lease is ended, for the retry to take over.
      (late) => {
        if (typeof late === 'string') {
          void this.call('idempotencyRelease', [key, late, fence.claimId, '0']).catch(
            () => undefined,
          );
        }
      },
    );
    if (lockVersion === -1) {
      throw new IdempotencyStoreUnavailableError(
        new Error('Redis refused the takeover as past its deadline'),
      );
    }
    if (lockVersion === 0 || lockVersion === null) return undefined;
    return {
      ...scope,
      claimId: fence.claimId,
      lockVersion: String(lockVersion),
      recoveryPoint: START_RECOVERY_POINT,
      phaseResults: {},
      leaseMs,
    } satisfies ActiveClaim;
  }

  async finish(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    const done = await this.call('idempotencyFinish', [
      ...this.answerArgs(claim, response),
      this.retentionMs,
    ]);
    return done === 1;
  }

  async completeAnswer(claim: ActiveClaim, response: StoredResponse): Promise<boolean> {
    const done = await this.call('idempotencyCompleteAnswer', this.answerArgs(claim, response));
    return done === 1;
  }

  /** The fenced claim and its answer, as the finish and complete-answer scripts read them. */
  private answerArgs(
    claim: ActiveClaim,
    response: StoredResponse,
  ): [string, ...(string | number | Buffer)[]] {
    return [
      this.keyOf(claim),
      claim.lockVersion,
      claim.claimId,
      response.status,
      JSON.stringify(response.headers),
      response.body,
    ];
  }

  async release(claim: ActiveClaim, forget: boolean): Promise<void> {
    await this.call('idempotencyRelease', [
      this.keyOf(claim),
      claim.lockVersion,
      claim.claimId,
      forget ? '1' : '0',
    ]);
  }

  async extendLease(claim: ActiveClaim): Promise<boolean> {
    const held = await this.call('idempotencyExtend', [
      this.keyOf(claim),
      claim.lockVersion,
      claim.claimId,
      claim.leaseMs,
      this.abandonedMs,
    ]);
    return held === 1;
  }

  /** Finished keys expire on their own (`PEXPIRE` at the finish): nothing to purge. */
  purgeBatch(): Promise<KeyScope[]> {
    return Promise.resolve([]);
  }

  /** Unfinished keys expire on their own after `abandonedKeyRetentionMs`. */
  purgeAbandonedBatch(): Promise<number> {
    return Promise.resolve(0);
  }

  /** Not known without a scan of the keyspace, which a gauge must not cost. */
  oldestUnfinishedAgeMs(): Promise<number | undefined> {
    return Promise.resolve(undefined);
  }

  /** The record's Redis key: exact, whatever the tenant and key hold. */
  private keyOf(scope: KeyScope): string {
    return `${this.prefix}${JSON.stringify([scope.tenantId, scope.key])}`;
  }

  /** The moment a call made now gives up, `timeoutMs` from now, on Redis's clock. */
  private deadline(timeoutMs = this.timeoutMs): number {
    return redisDeadlineMs(this.clock, Date.now(), timeoutMs);
  }

  /** One more reading of Redis's clock (`now` of a claim's reply), taken as it arrives. */
  private learn(redisNow: Buffer | number | undefined): void {
    const ms = Number(redisNow?.toString());
    if (Number.isFinite(ms)) this.clock = nextOffset(this.clock, ms, Date.now(), performance.now());
  }

  /**
   * Every call is bounded: a Redis that does not answer is a 503, never a hung request. A call
   * answered after that is handed to `late`, to undo what it did.
   */
  private async call(
    name: string,
    args: [string, ...(string | number | Buffer)[]],
    timeoutMs = this.timeoutMs,
    late?: (reply: unknown) => void,
  ) {
    const script = (this.redis as unknown as Record<string, Script>)[name].bind(this.redis);
    const reply = script(...args);
    const onLate = late && (() => void reply.then(late, () => undefined));
    try {
      return await withDeadline(reply, Math.max(1, timeoutMs), name, onLate, 'Redis');
    } catch (error) {
      this.logger.error(`idempotency store call ${name} failed: ${String(error)}`);
      throw new IdempotencyStoreUnavailableError(error);
    }
  }
}

/** A claim's reply: {1, claim id, '0', now}, {0, the record's fields..., now} or {-1, now}. */
type ClaimReply = (Buffer | number)[];
