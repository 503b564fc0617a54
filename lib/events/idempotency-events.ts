import { channel, type Channel } from 'node:diagnostics_channel';

/**
 * What the library does, as `node:diagnostics_channel` messages: subscribe with
 * `diagnostics_channel.subscribe(IDEMPOTENCY_CHANNELS.replayed, (event) => ...)`. Publishing
 * costs nothing while no one subscribes. Payloads name the route, tenant and key, and the
 * status where there is one; never a body.
 */
export const IDEMPOTENCY_CHANNELS = {
  /** A new key: this request runs the handler. */
  claimed: 'idempotency:claimed',
  /** An expired lease taken over: its worker stopped renewing it (a crash); this request resumes its work. */
  takenOver: 'idempotency:taken-over',
  /**
   * A key given back without an answer (the handler threw `RetryLaterError`, a transient
   * database failure) taken up by its retry, which resumes it: no worker was lost.
   */
  resumed: 'idempotency:resumed',
  /** The handler's answer committed with its effects and stored (`status`). */
  stored: 'idempotency:stored',
  /** A stored answer of status 500 or more. */
  storedError: 'idempotency:stored-error',
  /** A finished key's answer sent again (`fromMemory`: from the replay cache). */
  replayed: 'idempotency:replayed',
  /** 409: another request holds the key's lease. */
  conflict: 'idempotency:conflict',
  /** 422: the key was used with another request. */
  mismatch: 'idempotency:mismatch',
  /** 409: this request's lease was taken over; its work rolled back. */
  leaseLost: 'idempotency:lease-lost',
  /** The key given back without an answer stored (`reason`: the error's code). */
  released: 'idempotency:released',
  /** Rows the purge deleted (`finished`, `abandoned`, `processedMessages`). */
  purged: 'idempotency:purged',
  /** A consumer's message delivered again, applied nothing (`consumer`, `messageId`). */
  consumerDuplicate: 'idempotency:consumer-duplicate',
  /** A message given up after `maxAttempts` failed deliveries (`consumer`, `messageId`, `attempts`). */
  consumerGaveUp: 'idempotency:consumer-gave-up',
  /**
   * A job's step committed (`@IdempotentJob()`): its work so far with its key unfinished, as
   * the job moved itself on (`move`: `delayed`, `waiting-children`, `waiting`, `rate-limit`).
   */
  jobStep: 'idempotency:job-step',
  /**
   * A tick this replica did not run (`@IdempotentTask()`): another replica runs it
   * (`reason: 'running'`) or ran it (`'done'`). Not a conflict: every tick has one per other
   * replica.
   */
  tickSkipped: 'idempotency:tick-skipped',
} as const;

/** The payload of the request events. */
export interface IdempotencyEvent {
  /** `Controller.handler` of the route. */
  route: string;
  tenant: string;
  key: string;
  status?: number;
  reason?: string;
  fromMemory?: boolean;
  /**
   * The library's own time on the request, in milliseconds: on `claimed`, `takenOver`,
   * `replayed`, `conflict` and `mismatch`, from the interceptor's start to its decision (the
   * key, the fingerprint, the claim); on `stored`, the commit of the stored response.
   */
  durationMs?: number;
}

export type ChannelName = keyof typeof IDEMPOTENCY_CHANNELS;

const channels = Object.fromEntries(
  Object.entries(IDEMPOTENCY_CHANNELS).map(([name, id]) => [name, channel(id)]),
) as Record<ChannelName, Channel>;

/**
 * Publishes on a channel, if anyone listens: the payload is built only then, so a request
 * path with no subscriber pays for no event object.
 */
export function publish(name: ChannelName, event: () => object): void {
  const target = channels[name];
  if (target.hasSubscribers) target.publish(event());
}

/** `publish`, or a caller's own routing of the same events (a tick's skips). */
export type Publish = (name: ChannelName, event: () => object) => void;
