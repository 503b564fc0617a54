import { RequestRun, retryTarget } from './earlier-run.js';

/** A run as `retryTarget` sees it: its error handed on, and the later chain runs into it. */
interface RunShape {
  /** It joined run `joined` (an index) and was told that run's outcome. */
  joined?: number;
  /** Its error was handed on down its chain. */
  handedOn?: boolean;
  /** A later run already retried it. */
  retried?: boolean;
  /** Its subscriber is gone. */
  gone?: boolean;
  /** The later run's chain runs into this run's error chain. */
  retriedNow?: boolean;
}

function runsOf(shapes: RunShape[]): { all: RequestRun[]; later: RequestRun } {
  const all = shapes.map(() => new RequestRun());
  shapes.forEach((shape, index) => {
    const run = all[index];
    if (shape.joined !== undefined) run.joined = all[shape.joined];
    run.retried = shape.retried ?? false;
    run.gone = shape.gone ?? false;
    Object.defineProperty(run, 'handedOn', { get: () => shape.handedOn ?? false });
    run.retriedBy = () => shape.retriedNow ?? false;
  });
  const later = new RequestRun();
  return { all: [...all, later], later };
}

describe('retryTarget: the failed run a later run may run the handler again for', () => {
  it.each<[string, RunShape[], number | undefined]>([
    ['no earlier run retried: not a retry', [{ handedOn: true }], undefined],
    ['the owner retried, nothing else told: the owner', [{ handedOn: true, retriedNow: true }], 0],
    [
      'the owner retried, an audit told its error and carried it on: told',
      [
        { handedOn: true, retriedNow: true },
        { joined: 0, handedOn: true },
      ],
      undefined,
    ],
    [
      'the owner retried, an audit joined but left before the error: the owner',
      [
        { handedOn: true, retriedNow: true },
        { joined: 0, gone: true },
      ],
      0,
    ],
    [
      'an audit’s retry of the error it was told, the owner carried it on: told',
      [{ handedOn: true }, { joined: 0, handedOn: true, retriedNow: true }],
      undefined,
    ],
    [
      'the told run retried, the owner’s own chain retried before: the owner',
      [
        { handedOn: true, retried: true },
        { joined: 0, handedOn: true, retriedNow: true },
      ],
      0,
    ],
    [
      'an audit’s retry while a run that joined the owner still waits to be told: told',
      [
        { handedOn: true, retried: true },
        { joined: 0 },
        { joined: 0, handedOn: true, retriedNow: true },
      ],
      undefined,
    ],
    ['the owner’s error not handed on yet: told', [{ retriedNow: true }], undefined],
  ])('%s', (_name, shapes, expected) => {
    const { all, later } = runsOf(shapes);
    const target = retryTarget(all, later, []);
    expect(target === undefined ? undefined : all.indexOf(target)).toBe(expected);
  });
});
