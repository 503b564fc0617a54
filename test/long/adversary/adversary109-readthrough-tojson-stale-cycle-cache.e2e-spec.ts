/**
 * Fixed (session of 2026-12-07, third): the catch in typed-graph.ts `root()` takes back every
 * list the writer keeps by node, `links.known` (and `reaches`) with `madeBy`, `nearest`, `up`
 * and `lossAt`: a member left out leaves no memo at the indexes the next member's nodes take
 * (spec: typed-graph.spec.ts "a member left out takes back all it wrote").
 *
 * Adversary 109 (read-through of 1c704b3..4414a50): the typed-graph writer's new memo of
 * `isJsonCycle` walks (`JsonLinks.known`, by node index) is not taken back when a member that
 * could not be written is (its nodes truncated, their indexes given to the next member's). A
 * member that is a genuine `toJSON()` cycle leaves "target T is above node i" behind; the next
 * member's own node i (another object's `toJSON()` output) then answers that memo, and a
 * `toJSON()` of T there, which is no cycle at all, is taken for one: that member is left out
 * too (its data not kept, "left" told for it). Written alone, or before the other, it is kept.
 *
 * User code (ordinary ORM entities with back-references, serialized by their own toJSON):
 *   class Line   { toJSON() { return { sku: this.sku, order: this.order }; } }   // order.lines holds it
 *   class Refund { toJSON() { return { order: this.order, line: this.line }; } }
 *   a parent's kept data { line, refund }   (line first: its toJSON() goes round)
 *
 * Code path: lib/graphql/typed-graph.ts `graphWriter().root`'s catch (truncates `madeBy`,
 * `nearest`, `up`, `lossAt`, never `links.known`; `makers` keeps the target too), `cell` ->
 * `isJsonCycle` (`links.known?.[node]?.get(target)` answers from the discarded node).
 *
 * Docs quote: typed-graph.ts `writeGraph`: "one that cannot be written is left out alone";
 * `isJsonCycle`: "a toJSON() called at any number of places side by side ... never is" [a
 * cycle]; `JsonLinks.known`: "The links of a node never change once it is written" (they do:
 * the index is reused).
 *
 * Severity: medium (a member the writer can write is left out and told lost, depending only
 * on the order of the members before it; the parent a replay builds lacks it).
 *
 * Fails now: (un-skipped) writing { line, refund } tells `left` for both 'line' and 'refund',
 * and the graph read back has no `refund`.
 *
 * Controls: { line } alone: left out (its toJSON() output reaches its order, which holds it:
 * the writer's cycle); { refund } alone, and { refund, line }: `refund` is written (and
 * `line` then too: its order is a node already, where its toJSON() output stops).
 *
 * Suggested fix (verified on a scratch copy: the case then passes): truncate `links.known` in
 * the catch with the other per-node lists (`if (links.known.length > before) links.known.length
 * = before`). (`reaches` is set only for nodes below the member's start, never taken back.)
 */
import { readGraph, writeGraph } from '../../../lib/graphql/typed-graph.js';

class Order {
  lines: Line[] = [];
  constructor(readonly id: string) {}
}

class Line {
  constructor(
    readonly sku: string,
    readonly order: Order,
  ) {
    order.lines.push(this);
  }
  toJSON() {
    return { sku: this.sku, order: this.order };
  }
}

class Refund {
  constructor(
    readonly order: Order,
    readonly line: Line,
  ) {}
  toJSON() {
    return { order: this.order, line: this.line };
  }
}

function written(members: (order: Order, line: Line, refund: Refund) => Record<string, unknown>) {
  const order = new Order('o-1');
  const line = new Line('sku-1', order);
  const refund = new Refund(order, line);
  const left: string[] = [];
  const result = writeGraph(members(order, line, refund), {
    lost: () => undefined,
    left: (key) => left.push(String(key)),
  });
  const back = readGraph(result.graph) as Record<string, unknown>;
  return { left, keys: Object.keys(back) };
}

describe('adversary 109 read-through: a stale toJSON() cycle memo leaves the next member out', () => {
  it('control: the refund alone is written', () => {
    expect(written((_o, _l, refund) => ({ refund }))).toEqual({ left: [], keys: ['refund'] });
  });

  it('control: the line alone is a toJSON() cycle (its order holds it): left out', () => {
    expect(written((_o, line) => ({ line }))).toEqual({ left: ['line'], keys: [] });
  });

  it('control: the refund before the line is written (and the line then, its order a node already)', () => {
    expect(written((_o, line, refund) => ({ refund, line }))).toEqual({
      left: [],
      keys: ['refund', 'line'],
    });
  });

  it('the refund after the line is written too', () => {
    expect(written((_o, line, refund) => ({ line, refund }))).toEqual({
      left: ['line'],
      keys: ['refund'],
    });
  });
});
