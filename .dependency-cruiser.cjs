/**
 * The library's layers, from the bottom: `shapes/` (the shared types, errors and constants),
 * `decisions/` (pure functions over them), the storage concepts (`connection/` to PostgreSQL,
 * `claim/`, `answer/`, `schema/`), `transaction/`, the `data-layers/` that join it, and
 * `events/`, then the edges (`http/`,
 * `graphql/`, `messages/`, `phases/`, the module's face at the root). Layers point down: a type
 * two files share sits below both. `npm run lint` runs this file (`depcruise lib`), and so does
 * `lib/layers.spec.ts` within `npm test`; docs/internals/layout.md draws the tree.
 */
const STORAGE = '^lib/(connection|claim|answer|schema)/';
const EDGES = '^lib/(http|graphql|messages|phases|openapi|health|cli|client|redis|testing)/';
const FACE = '^lib/[^/]+[.]ts$';

module.exports = {
  forbidden: [
    {
      name: 'no-loops',
      comment:
        'A file that reaches itself through its imports (type imports included) hides a shared ' +
        'shape in one of its users: move the shape down to where both can import it.',
      severity: 'error',
      from: { path: '^lib/' },
      to: { circular: true },
    },
    {
      name: 'shapes-import-nothing-of-ours',
      comment:
        'The shared shapes (options, context, errors, the stored response, the store contracts) ' +
        'are what every layer agrees on: they import only one another, so any layer can use them.',
      severity: 'error',
      from: { path: '^lib/shapes/' },
      to: { path: '^lib/', pathNot: '^lib/shapes/' },
    },
    {
      name: 'decisions-import-only-shapes',
      comment:
        'A decision is a pure function of shapes, tested by a table: it reaches no database, ' +
        'event channel or framework of ours.',
      severity: 'error',
      from: { path: '^lib/decisions/' },
      to: { path: '^lib/', pathNot: '^lib/(shapes|decisions)/' },
    },
    {
      name: 'storage-never-imports-the-edges',
      comment:
        'The stores serve HTTP, GraphQL, messages and jobs alike: they know none of them, nor ' +
        "the module's face that wires them.",
      severity: 'error',
      from: { path: STORAGE },
      to: { path: [EDGES, FACE] },
    },
    {
      name: 'events-are-published-by-callers',
      comment:
        'A store says what happened in what it returns; the caller, who knows the route and the ' +
        'request, publishes the event. A store that publishes cannot be reused quietly (the ' +
        'purger, the CLI, the contract tests).',
      severity: 'error',
      from: { path: STORAGE },
      to: { path: '^lib/events/' },
    },
    {
      name: 'stores-never-import-the-transaction',
      comment:
        "The request's transaction runs on the stores (a claim in it, a finish with it), not the " +
        'other way: a store sees the transaction through the shape it needs (shapes/).',
      severity: 'error',
      from: { path: STORAGE },
      to: { path: '^lib/(transaction|data-layers)/' },
    },
    {
      name: 'connection-is-the-bottom-of-storage',
      comment:
        'URLs, hosts, deadlines, poolers and driver errors know nothing of claims, answers or ' +
        'the schema built on them.',
      severity: 'error',
      from: { path: '^lib/connection/' },
      to: { path: '^lib/(claim|answer|schema)/' },
    },
    {
      name: 'the-claim-knows-no-answer-layers',
      comment:
        'Sealing and bodies by pointer wrap a claim store (answer/ builds on claim/); the claim ' +
        'does not know they exist.',
      severity: 'error',
      from: { path: '^lib/claim/' },
      to: { path: '^lib/(answer|schema)/' },
    },
    {
      name: 'transaction-knows-no-edge',
      comment:
        "The request's transaction, and the data layers that join it, are the same under HTTP, " +
        'GraphQL and messages: they import none of them.',
      severity: 'error',
      from: { path: '^lib/(transaction|data-layers)/' },
      to: { path: [EDGES, FACE] },
    },
    {
      name: 'transaction-knows-no-data-layer',
      comment:
        "The request's transaction is one whatever the app's data layer: TypeORM's query " +
        'runner, a node-postgres pool and Prisma join it from above (data-layers/), through ' +
        'its scope; it never asks which one did.',
      severity: 'error',
      from: { path: '^lib/transaction/' },
      to: { path: '^lib/data-layers/' },
    },
    {
      name: 'testing-and-cli-are-leaves',
      comment:
        'The contract tests and the CLI are entry points of their own (package exports, the ' +
        'bin): the library never imports them.',
      severity: 'error',
      from: { path: '^lib/', pathNot: '^lib/(testing|cli)/' },
      to: { path: '^lib/(testing|cli)/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '[.]spec[.]ts$' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
};
