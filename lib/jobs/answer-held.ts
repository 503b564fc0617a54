import { type StoredResponse } from '../shapes/stored-response.js';
import { type HeldData, type HeldProgress, jsonOf } from './job-steps.js';

/**
 * The header of a job's kept answer that keeps what its run held (`updateData()`,
 * `updateProgress()` before its work committed), written to BullMQ only after the answer's
 * commit: kept in that commit, with the result, so that a worker that dies in between (or a
 * write that fails) leaves it there, and the job's replay writes it (adversary 76). A header of
 * the answer, not a phase result: a replay reads the answer alone; a worker of an earlier
 * version ignores it (and, as before, writes nothing).
 */
export const ANSWER_HELD = 'bullmq-held';

/**
 * What the header keeps (its JSON): the held data's and progress's JSON, each with the JSON
 * BullMQ had before (`over`), all in base64 (a NUL or a lone surrogate, which jsonb refuses,
 * commits as BullMQ keeps it), and the job's id and the time it was added (`id`, `added`): the same
 * job's replay only. Both: two jobs of one key added in one `addBulk()` (or by two producers
 * in one millisecond) share the time, and another job added again under its id shares the id
 * (adversary 77).
 */
interface KeptAnswerHeld {
  id: string | null;
  added: number;
  data?: string;
  over?: string;
  progress?: string;
  progressOver?: string;
}

/** Which job a kept answer's held data is of: its id (BullMQ's `job.id`) and `job.timestamp`. */
export interface HeldJob {
  id?: string;
  added: number;
}

/** The header's value for what the run holds as its answer commits; none where it holds nothing. */
export function answerHeldHeader(
  held: HeldData,
  progress: HeldProgress,
  job: HeldJob,
): string | undefined {
  if (!held && !progress) return undefined;
  const kept: KeptAnswerHeld = { id: job.id ?? null, added: job.added };
  if (held) {
    kept.data = toBase64(jsonOf(held.data));
    kept.over = toBase64(held.over);
  }
  if (progress) {
    kept.progress = toBase64(jsonOf(progress.value));
    kept.progressOver = toBase64(progress.over);
  }
  return JSON.stringify(kept);
}

/** What a replay gives back to BullMQ before it completes (see `answerHeldToWrite`). */
export interface AnswerHeldWrite {
  data?: { data: unknown };
  progress?: { value: unknown };
}

/**
 * What the replay of a job writes to BullMQ from its kept answer (a pure decision): only the
 * same job's (its id and the time it was added, both: not a twin of its key added in the same
 * millisecond, nor a job added again under its id; a header without the id, of an earlier
 * version, names no job for sure: nothing), and each of its data and progress only where
 * BullMQ still has what it had before the answer committed (`over`): never over what was
 * written since (an operator's fix), nor onto another job added again under its id, whose data
 * is its own. `currentData`, `currentProgress`: the JSON of what BullMQ has now.
 */
export function answerHeldToWrite(
  stored: StoredResponse,
  job: HeldJob,
  currentData: string,
  currentProgress: string,
): AnswerHeldWrite | undefined {
  const text = stored.headers[ANSWER_HELD];
  if (typeof text !== 'string') return undefined;
  let kept: Partial<Record<keyof KeptAnswerHeld, unknown>>;
  try {
    kept = JSON.parse(text) as typeof kept;
  } catch {
    return undefined;
  }
  if (kept === null || typeof kept !== 'object') return undefined;
  if (kept.added !== job.added || kept.id === undefined || kept.id !== (job.id ?? null)) {
    return undefined;
  }
  const write: AnswerHeldWrite = {};
  const data = changed(kept.data, kept.over, currentData);
  if (data !== undefined) write.data = { data: JSON.parse(data) as unknown };
  const progress = changed(kept.progress, kept.progressOver, currentProgress);
  if (progress !== undefined) write.progress = { value: JSON.parse(progress) as unknown };
  return write.data || write.progress ? write : undefined;
}

/** The kept JSON, where BullMQ still has the JSON of before it and not it. */
function changed(value: unknown, over: unknown, current: string): string | undefined {
  if (typeof value !== 'string' || typeof over !== 'string') return undefined;
  const json = fromBase64(value);
  return json !== current && fromBase64(over) === current ? json : undefined;
}

const toBase64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');
const fromBase64 = (text: string) => Buffer.from(text, 'base64').toString('utf8');
