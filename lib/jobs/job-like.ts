/**
 * What the library reads of a BullMQ job (`Job` of `bullmq`), by shape: the package is the
 * app's, never imported by the library, so that an app without BullMQ compiles and runs.
 */
export interface JobLike {
  /** The job's id: the app's own (`opts.jobId`), else a number BullMQ counts up per queue. */
  readonly id?: string;
  readonly name: string;
  readonly data: unknown;
  readonly queueName: string;
  /** Its queue's prefix in Redis (BullMQ's `prefix` option, `bull` by default). */
  readonly prefix?: string;
  /** When the job was added (ms since the epoch). */
  readonly timestamp: number;
  readonly opts?: { readonly jobId?: string };
  /** Moves the active job to the delayed set (its lock's `token`): no attempt is counted. */
  moveToDelayed(timestamp: number, token?: string): Promise<void>;
  /** Replaces its data in BullMQ (and on the object). */
  updateData?(data: unknown): Promise<void>;
  /** Its progress: the last BullMQ was given (`updateProgress`). */
  readonly progress?: unknown;
  /** Replaces its progress in BullMQ (and on the object), with BullMQ's `progress` event. */
  updateProgress?(progress: unknown): Promise<void>;
  /** Moves it to wait for its children (BullMQ's flows); false when none is left to wait for. */
  moveToWaitingChildren?(token: string, options?: object): Promise<boolean>;
}
