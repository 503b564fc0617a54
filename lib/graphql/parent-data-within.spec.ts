import { parentDataWithin } from './parent-data-within.js';
import { hiddenKey } from './hidden-members.js';
import { graphReachedBy } from './parent-graph.js';
import { readGraphNodes } from './typed-graph.js';

describe('parentDataWithin', () => {
  const members = ['__parent', '__parentClasses'];
  const big = { json: { bio: 'x'.repeat(100) } };
  const small = { json: { a: 1 } };
  const line = { id: 1, __parent: small };
  const customer = { name: 'Ada', __parent: big, lines: [line] };
  const wire = {
    id: 1,
    __parent: small,
    customer,
    // A JSON scalar's document of the app's whose nodes link up with `__parent`: its data.
    meta: { x: 1, __parent: { note: 'n'.repeat(500) } },
  };
  const holders = [wire, customer, line];
  /** What one member takes: `"__parent":<data>,`. */
  const weight = (data: unknown) => Buffer.byteLength(`"__parent":${JSON.stringify(data)},`);

  const cases: [string, number, { dropped: number; left: string[] } | undefined][] = [
    ['not over the limit: nothing to do', 0, undefined],
    ['over by a byte: the largest only', 1, { dropped: 1, left: ['root', 'line'] }],
    ['over by the largest exactly: it alone', weight(big), { dropped: 1, left: ['root', 'line'] }],
    [
      'over by more than the largest: the next, in order',
      weight(big) + 1,
      { dropped: 2, left: ['line'] },
    ],
    ['over by all of them: all', weight(big) + 2 * weight(small), { dropped: 3, left: [] }],
    [
      "over by more than all of them weigh: not enough (the app's own __parent is no candidate)",
      weight(big) + 2 * weight(small) + 1,
      undefined,
    ],
  ];
  it.each(cases)('%s', (_name, over, expected) => {
    const within = parentDataWithin(wire, holders, members, over);
    if (!expected) {
      expect(within).toBeUndefined();
      return;
    }
    const got = within!.wire as typeof wire;
    const left = [
      ...('__parent' in got ? ['root'] : []),
      ...('__parent' in got.customer ? ['customer'] : []),
      ...('__parent' in got.customer.lines[0] ? ['line'] : []),
    ];
    expect({ dropped: within!.dropped, left }).toEqual(expected);
    // The holders left are the copy's, for a second trim (at the outputs).
    expect(within!.holders).toHaveLength(3 - expected.dropped);
    for (const holder of within!.holders) expect('__parent' in holder).toBe(true);
    // The fields are the wire's, untouched; the app's data too; the value given not changed.
    expect(got.customer.name).toBe('Ada');
    expect(got.meta).toEqual(wire.meta);
    expect(wire.customer.__parent).toBe(big);
  });

  it("leaves out a holder's class tree with its data, weighed together", () => {
    const holder = { id: 1, __parent: small, __parentClasses: { k: { a: { c: 'Row' } } } };
    const both =
      weight(small) +
      Buffer.byteLength(`"__parentClasses":${JSON.stringify(holder.__parentClasses)},`);
    expect(parentDataWithin(holder, [holder], members, both + 1)).toBeUndefined();
    expect(parentDataWithin(holder, [holder], members, both)).toEqual({
      wire: { id: 1 },
      dropped: 1,
      hiddenDropped: 0,
      holders: [],
      pinnedHolders: [],
    });
  });

  it('finds a holder inside a list, by identity not by name', () => {
    const item = { id: 2, __parent: big };
    const other = { id: 3, __parent: big };
    const within = parentDataWithin([item, other], [other], members, 1);
    expect(within?.wire).toEqual([item, { id: 3 }]);
  });

  describe("with one graph for the answer's parents (adversary 105)", () => {
    /** Two lines naming one order (node 1, with a long note), and an invoice of its own. */
    const graph = {
      g: [
        ['o', 'qty', 2, 'order', ['@', 1]],
        ['o', 'note', 'n'.repeat(300)],
        ['o', 'qty', 3, 'order', ['@', 1]],
        ['o', 'memo', 'm'.repeat(100)],
      ],
    };
    const first = { id: 1, __parent: { p: 0 } };
    const second = { id: 2, __parent: { p: 2 } };
    const invoice = { id: 3, __parent: { p: 3 } };
    const wire = { lines: [first, second], invoice };
    const node = (index: number) => JSON.stringify(graph.g[index]).length + 1;
    const ref = (index: number) => `"__parent":{"p":${index}},`.length;

    const cases: [string, number, { left: number[]; graph: unknown[] | undefined } | undefined][] =
      [
        [
          "over by a byte: the invoice (the largest of its own: the order is both lines')",
          1,
          { left: [1, 2], graph: [graph.g[0], graph.g[1], graph.g[2]] },
        ],
        [
          'over by more than the invoice: a line goes, the order stays for the other',
          ref(3) + node(3) + 1,
          // The first line's own (`{ qty, order }`) goes; the second's node is renumbered.
          { left: [2], graph: [graph.g[1], ['o', 'qty', 3, 'order', ['@', 0]]] },
        ],
        [
          'over by more than the order is worth to one line: all go, the order with the last',
          ref(3) + node(3) + ref(0) + node(0) + 1,
          { left: [], graph: undefined },
        ],
        [
          'over by more than the whole graph and its names: not enough',
          JSON.stringify(graph).length + `,"parentGraph":`.length + 3 * ref(0) + 1,
          undefined,
        ],
      ];
    it.each(cases)('%s', (_name, over, expected) => {
      const within = parentDataWithin(wire, [first, second, invoice], members, over, graph);
      if (!expected) {
        expect(within).toBeUndefined();
        return;
      }
      const got = within!.wire as typeof wire;
      const left = [...got.lines, got.invoice].filter((o) => '__parent' in o).map((o) => o.id);
      expect({ left, graph: within!.graph?.g }).toEqual(expected);
      // Each kept parent names its own data in the graph kept, as it read before.
      for (const holder of within!.holders as { id: number; __parent: { p: number } }[]) {
        const before = [first, second, invoice].find((o) => o.id === holder.id)!.__parent.p;
        expect(readGraphNodes(within!.graph!)[holder.__parent.p]).toEqual(
          readGraphNodes(graph)[before],
        );
      }
      // The wire and the graph given are not changed.
      expect(first.__parent).toEqual({ p: 0 });
      expect(graph.g).toHaveLength(4);
    });

    it('keeps what a pinned __kept reaches, and names its node anew (adversary 107)', () => {
      /** The invoice's `__kept` names the order: never left out, nor freed with the lines. */
      const pinned = { id: 4, __kept: { p: 1 } };
      const all = { ...wire, pinned };
      const over = ref(3) + node(3) + ref(0) + node(0) + 1;
      const within = parentDataWithin(all, [first, second, invoice], members, over, graph, {
        holders: [pinned],
        member: '__kept',
      });
      expect(within?.graph?.g).toEqual([graph.g[1]]);
      expect(within?.pinnedHolders).toEqual([{ id: 4, __kept: { p: 0 } }]);
      expect((within?.wire as typeof all).pinned).toBe(within?.pinnedHolders[0]);
    });

    describe('one object at several places, its record one node they all name (adversary 109)', () => {
      const shared = {
        g: [
          ['o', 'description', 'd'.repeat(300)],
          ['o', 'memo', 'm'.repeat(100)],
        ],
      };
      const places = [1, 2, 3].map((id) => ({ id, __parent: { p: 0 } }));
      const other = { id: 4, __parent: { p: 1 } };
      const all = { items: places, other };
      const node = (index: number) => JSON.stringify(shared.g[index]).length + 1;
      const ref = (index: number) => `"__parent":{"p":${index}},`.length;

      it.each<[string, number, number]>([
        ['over by a byte: the holder of its own goes, the places keep their one node', 1, 1],
        [
          'over by more than all but the one node: the node goes only with the last place',
          ref(1) + node(1) + 3 * ref(0) + 1,
          4,
        ],
      ])('%s', (_name, over, dropped) => {
        const within = parentDataWithin(all, [...places, other], members, over, shared)!;
        expect(within.dropped).toBe(dropped);
        // Every place still holding its data names the one node, as it read before.
        const kept = within.holders as { __parent: { p: number } }[];
        for (const holder of kept) {
          expect(readGraphNodes(within.graph!)[holder.__parent.p]).toEqual(
            readGraphNodes(shared)[0],
          );
        }
        expect(new Set(kept.map((holder) => holder.__parent.p)).size).toBe(kept.length > 0 ? 1 : 0);
        if (kept.length === 0) expect(within.graph).toBeUndefined();
      });
    });
  });

  describe("a kept parent's own object's node (`s`, adversary 108)", () => {
    /**
     * A summary's data (0) reaches the order (1) and both lines' rows (2, 3: large); each line's
     * own data (4, 5) is small, and names its row as its own object (`s`).
     */
    const graph = {
      g: [
        ['o', 'order', ['@', 1]],
        ['o', 'a', ['@', 2], 'b', ['@', 3]],
        ['o', 'description', 'x'.repeat(300)],
        ['o', 'description', 'y'.repeat(300)],
        ['o', 'orderId', 1],
        ['o', 'orderId', 1],
      ],
    };
    const node = (index: number) => JSON.stringify(graph.g[index]).length + 1;
    const summary = { id: 0, __parent: { p: 0 } };
    const lineA = { id: 1, __parent: { p: 4, s: 2 } };
    const lineB = { id: 2, __parent: { p: 5, s: 3 } };
    const wire = { summary, lines: [lineA, lineB] };
    const parents = [summary, lineA, lineB];
    /** What leaving the summary out frees, its rows with it: `s` alone keeps no node. */
    const summaryFrees = `"__parent":{"p":0},`.length + node(0) + node(1) + node(2) + node(3);

    it.each<
      [string, number, { dropped: number; left: number[]; refs: unknown[]; graph: unknown[] }]
    >([
      [
        "over by a byte: the summary goes, and the rows only it reached, the lines' `s` with them",
        1,
        { dropped: 1, left: [1, 2], refs: [{ p: 0 }, { p: 1 }], graph: [graph.g[4], graph.g[5]] },
      ],
      [
        'over by nearly all the summary frees (its rows with it): the summary alone is enough',
        summaryFrees - 40,
        { dropped: 1, left: [1, 2], refs: [{ p: 0 }, { p: 1 }], graph: [graph.g[4], graph.g[5]] },
      ],
    ])('%s', (_name, over, expected) => {
      const within = parentDataWithin(wire, parents, members, over, graph)!;
      const got = within.wire as typeof wire;
      const kept = [got.summary, ...got.lines].filter((o) => '__parent' in o);
      expect({
        dropped: within.dropped,
        left: kept.map((o) => o.id),
        refs: kept.map((o) => o.__parent),
        graph: within.graph?.g,
      }).toEqual(expected);
    });

    it('a pinned __kept keeps its own `s`, renumbered, where it still reaches it', () => {
      /**
       * An entity's `__kept` (6) reaches the order too, and names row 2 as its own object; the
       * summary holds a note of its own, the largest then.
       */
      const noted = ['o', 'order', ['@', 1], 'note', 'n'.repeat(100)];
      const pinnedGraph = { g: [noted, ...graph.g.slice(1), ['o', 'order', ['@', 1]]] };
      const pinned = { id: 9, __kept: { p: 6, s: 2 } };
      const all = { ...wire, pinned };
      const within = parentDataWithin(all, parents, members, 1, pinnedGraph, {
        holders: [pinned],
        member: '__kept',
      })!;
      expect(within.dropped).toBe(1);
      // The rows stay (the pinned reaches them): each line's `s` and the pinned's renumbered.
      expect(within.pinnedHolders).toEqual([{ id: 9, __kept: { p: 5, s: 1 } }]);
      expect((within.wire as typeof wire).lines.map((line) => line.__parent)).toEqual([
        { p: 3, s: 1 },
        { p: 4, s: 2 },
      ]);
    });
  });

  describe("a left-out parent whose own object's node stays (`{ s }`, adversary 109)", () => {
    /**
     * Three lines' own data (0, 1, 2: line 1's notes long) reach their order (3), which reaches
     * each line's own object (4, 5, 6: `line.order.lines[i]` is the line, its `s`).
     */
    const graph = {
      g: [
        ['o', 'notes', 'N'.repeat(300), 'order', ['@', 3]],
        ['o', 'notes', 'a', 'order', ['@', 3]],
        ['o', 'notes', 'b', 'order', ['@', 3]],
        ['o', 'id', 9, 'one', ['@', 4], 'two', ['@', 5], 'three', ['@', 6]],
        ['o', 'id', 1, 'notes', 'N'.repeat(300), 'order', ['@', 3]],
        ['o', 'id', 2, 'notes', 'a', 'order', ['@', 3]],
        ['o', 'id', 3, 'notes', 'b', 'order', ['@', 3]],
      ],
    };
    const lines = [
      { id: 1, __parent: { p: 0, s: 4 } },
      { id: 2, __parent: { p: 1, s: 5 } },
      { id: 3, __parent: { p: 2, s: 6 } },
    ];
    const wire = { lines };
    /** What a `__parent` takes in the answer, and the graph (`,"parentGraph":` and it). */
    const refBytes = (ref: unknown) => `"__parent":${JSON.stringify(ref)},`.length;
    const graphBytes = (kept: unknown) => `,"parentGraph":${JSON.stringify(kept)}`.length;
    /** Everything the lines' data takes: each `__parent` and the whole graph. */
    const all = lines.reduce((sum, line) => sum + refBytes(line.__parent), 0) + graphBytes(graph);
    const refs = (within: ReturnType<typeof parentDataWithin>) =>
      (within!.wire as typeof wire).lines.map((line) => line.__parent);

    it.each<[string, number, unknown[], unknown[] | undefined]>([
      [
        "over by a byte: line 1's data goes, its own object stays (the order reaches it): `{ s }`",
        1,
        [{ s: 3 }, { p: 0, s: 4 }, { p: 1, s: 5 }],
        graphReachedBy(graph, [1, 2]).graph.g,
      ],
      [
        'over by all of it: every line goes, the order with the last, and each `s` with it',
        all,
        [undefined, undefined, undefined],
        undefined,
      ],
    ])('%s', (_name, over, expected, keptGraph) => {
      const within = parentDataWithin(wire, lines, members, over, graph)!;
      expect(refs(within)).toEqual(expected);
      expect(within.graph?.g).toEqual(keptGraph);
      // The left-out ones that keep their `{ s }` are holders still, for a second trim.
      expect(within.holders).toHaveLength(expected.filter(Boolean).length);
      // Each `s` names that line's own object in the graph kept.
      (expected as ({ s: number } | undefined)[]).forEach((ref, i) => {
        if (ref) expect(readGraphNodes(within.graph!)[ref.s]).toMatchObject({ id: i + 1 });
      });
    });

    it('a second trim renumbers a left-out `{ s }`, and lets it go with the last to reach it', () => {
      const once = parentDataWithin(wire, lines, members, 1, graph)!;
      const again = parentDataWithin(once.wire, once.holders, members, 1, once.graph)!;
      // Line 2 went next; line 3's data still reaches the order, so the rows stay.
      expect(refs(again)).toEqual([{ s: 2 }, { s: 3 }, { p: 0, s: 4 }]);
      expect(readGraphNodes(again.graph!)[2]).toMatchObject({ id: 1 });
      const last = parentDataWithin(again.wire, again.holders, members, 1, again.graph)!;
      expect(refs(last)).toEqual([undefined, undefined, undefined]);
      expect(last.graph).toBeUndefined();
      expect(last.holders).toEqual([]);
    });

    describe('the rows pinned by a `__kept` (the order): every line out still names its row', () => {
      const pinned = { id: 9, __kept: { p: 3 } };
      const kept = graphReachedBy(graph, [3]).graph;
      /** What every line's data out frees: their refs and nodes 0-2, less their `{ s }`. */
      const freed =
        all -
        graphBytes(kept) -
        [{ s: 1 }, { s: 2 }, { s: 3 }].reduce((sum, ref) => sum + refBytes(ref), 0);
      it.each<[string, number, unknown[] | undefined]>([
        [
          'over by what their data frees: each keeps its `{ s }`',
          freed,
          [{ s: 1 }, { s: 2 }, { s: 3 }],
        ],
        [
          'over by a byte more: the last `{ s }` goes too',
          freed + 1,
          [{ s: 1 }, { s: 2 }, undefined],
        ],
        [
          'over by all the `{ s }` too: none left',
          freed + 3 * refBytes({ s: 1 }),
          [undefined, undefined, undefined],
        ],
        ['over by more: not enough', freed + 3 * refBytes({ s: 1 }) + 1, undefined],
      ])('%s', (_name, over, expected) => {
        const within = parentDataWithin({ ...wire, pinned }, lines, members, over, graph, {
          holders: [pinned],
          member: '__kept',
        });
        if (!expected) {
          expect(within).toBeUndefined();
          return;
        }
        expect(refs(within)).toEqual(expected);
        expect(within!.dropped).toBe(3);
        expect(within!.graph).toEqual(kept);
        expect(within!.pinnedHolders).toEqual([{ id: 9, __kept: { p: 0 } }]);
      });
    });
  });
});

describe('parentDataWithin: hidden members first', () => {
  const members = ['__parent'];
  const raw = hiddenKey('raw', false);
  // Three line parents, each with the columns its resolver reads and a hidden 500-byte cache.
  const graph = {
    g: [
      ['o', 'qty', 2, 'unitPrice', 1, raw, ['@', 3]],
      ['o', 'qty', 2, 'unitPrice', 2, raw, ['@', 4]],
      ['o', 'qty', 2, 'unitPrice', 3, raw, ['@', 5]],
      ['o', 'note', 'a'.repeat(500)],
      ['o', 'note', 'b'.repeat(500)],
      ['o', 'note', 'c'.repeat(500)],
    ],
  };
  const lines = [0, 1, 2].map((p) => ({ id: p + 1, __parent: { p } }));
  const wire = { id: 9, lines };
  /** What leaving every cache out frees: the graph's bytes with them, less without them. */
  const bare = { g: graph.g.slice(0, 3).map((node) => node.slice(0, 5)) };
  const cachesFree = JSON.stringify(graph).length - JSON.stringify(bare).length;

  it.each<[string, number, { dropped: number; hiddenDropped: number; nodes: number } | undefined]>([
    ['over by a byte: one cache, no parent', 1, { dropped: 0, hiddenDropped: 1, nodes: 5 }],
    [
      'over by more than two caches: all three, no parent',
      1100,
      { dropped: 0, hiddenDropped: 3, nodes: 3 },
    ],
    // Past what all the caches free, the parents' data goes (the largest first).
    [
      'over by more than every cache: then parents',
      cachesFree + 1,
      { dropped: 1, hiddenDropped: 3, nodes: 2 },
    ],
  ])('%s', (_what, over, expected) => {
    const within = parentDataWithin(wire, lines, members, over, graph)!;
    expect({
      dropped: within.dropped,
      hiddenDropped: within.hiddenDropped,
      nodes: within.graph?.g.length,
    }).toEqual(expected);
    // The parents kept name their own (renumbered) nodes, their columns whole.
    const read = readGraphNodes(within.graph!) as { qty: number; unitPrice: number }[];
    const kept = (within.wire as typeof wire).lines.filter((line) => '__parent' in line);
    expect(kept.map((line) => read[line.__parent.p].unitPrice)).toEqual(
      kept.map((line) => line.id),
    );
  });
});
