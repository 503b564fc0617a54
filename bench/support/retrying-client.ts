/**
 * The careful client of the soak and the HA run: one HTTP exchange at a time, retried with
 * backoff and full jitter against any live instance until its answer is final, every answer
 * counted, and any 5xx but a documented 503 recorded as a violation.
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface Figures {
  requests: number;
  statuses: Map<string, number>;
  violations: string[];
  /** Every answer with the time it came (ms since the epoch), for figures by period. */
  answers: { at: number; status: string }[];
}

export function newFigures(): Figures {
  return { requests: 0, statuses: new Map(), violations: [], answers: [] };
}

export class RetryingClient {
  constructor(
    private readonly figures: Figures,
    private readonly tenant: string,
  ) {}

  /** One exchange; a connection error is status 0. */
  async post(url: string, path: string, headers: Record<string, string>, body: unknown) {
    this.figures.requests++;
    try {
      const res = await fetch(`${url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-tenant-id': this.tenant, ...headers },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(15_000),
      });
      const text = await res.text();
      this.count(String(res.status));
      return { status: res.status, text };
    } catch (error) {
      // The client's own limit (15 s) is told apart from a connection refused or reset.
      const timedOut = (error as Error | undefined)?.name === 'TimeoutError';
      this.count(timedOut ? 'no answer in 15 s' : 'connection error');
      return { status: 0, text: '' };
    }
  }

  /**
   * Retries until `final(status)` or the deadline; undefined when the deadline came first. A
   * deadline given as a function is read before each attempt (it may move).
   */
  async untilAnswered(
    urls: () => string[],
    path: string,
    headers: Record<string, string>,
    body: unknown,
    final: (status: number) => boolean,
    deadline: number | (() => number),
  ) {
    const until = typeof deadline === 'number' ? () => deadline : deadline;
    for (let attempt = 0; Date.now() < until(); attempt++) {
      const live = urls();
      const url = live[Math.floor(Math.random() * live.length)];
      const res = await this.post(url, path, headers, body);
      if (res.status >= 500 && res.status !== 503) {
        this.figures.violations.push(
          `${path} ${headers['idempotency-key'] ?? ''}: ${res.status} ${res.text.slice(0, 200)}`,
        );
      }
      if (final(res.status)) return { ...res, attempts: attempt + 1, at: Date.now() };
      await sleep(Math.random() * Math.min(1000, 50 * 2 ** attempt));
    }
    return undefined;
  }

  private count(status: string) {
    this.figures.statuses.set(status, (this.figures.statuses.get(status) ?? 0) + 1);
    this.figures.answers.push({ at: Date.now(), status });
  }
}
