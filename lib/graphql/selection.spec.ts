import * as graphql from 'graphql';
import { selectedFields, type Selection, subfieldKeys } from './selection.js';

const schema = graphql.buildSchema(`
  interface Named { name: String }
  type Author implements Named { name: String, books: [Book] }
  type Book implements Named { id: Int, name: String, title: String, author: Author }
  union Shelf = Author | Book
  type Query { book: Book, shelf: Shelf }
`);
const Book = schema.getType('Book') as graphql.GraphQLObjectType;
const Author = schema.getType('Author') as graphql.GraphQLObjectType;

/** The selection of the operation's first field, as GraphQL hands it to the field's resolver. */
function selecting(operation: string, variables: Record<string, unknown> = {}): Selection {
  const document = graphql.parse(operation);
  const fragments: Record<string, graphql.FragmentDefinitionNode> = {};
  let field: graphql.FieldNode | undefined;
  for (const definition of document.definitions) {
    if (definition.kind === graphql.Kind.FRAGMENT_DEFINITION) {
      fragments[definition.name.value] = definition;
    } else if (definition.kind === graphql.Kind.OPERATION_DEFINITION) {
      field = definition.selectionSet.selections[0] as graphql.FieldNode;
    }
  }
  return { nodes: [field!], fragments, variables };
}

/** Each selected field's name, with how many nodes select it. */
function named(type: graphql.GraphQLObjectType, selection: Selection): Record<string, number> {
  const fields = selectedFields(graphql, schema, type, selection);
  return Object.fromEntries([...fields].map(([name, nodes]) => [name, nodes.length]));
}

describe('selectedFields', () => {
  it.each<[string, graphql.GraphQLObjectType, Selection, Record<string, number>]>([
    [
      'the fields selected, not the type',
      Book,
      selecting('{ book { id title } }'),
      { id: 1, title: 1 },
    ],
    [
      'a field under two aliases, once by its name with both nodes',
      Book,
      selecting('{ book { a: author { name } b: author { books { id } } id } }'),
      { author: 2, id: 1 },
    ],
    [
      'no __typename (GraphQL answers it)',
      Book,
      selecting('{ book { __typename id } }'),
      { id: 1 },
    ],
    [
      'a named fragment, and a fragment on an interface the type implements',
      Book,
      selecting('{ book { ...B ...N } } fragment B on Book { title } fragment N on Named { name }'),
      { title: 1, name: 1 },
    ],
    [
      "a fragment spread twice, once; another type's fragment, not",
      Book,
      selecting(
        '{ book { ...B ...B ...A } } fragment B on Book { id } fragment A on Author { books { id } }',
      ),
      { id: 1 },
    ],
    [
      "the inline fragment of a union's member that the value is",
      Author,
      selecting(
        '{ shelf { ... on Book { title } ... on Author { name } ... on Shelf { ... on Named { name } } } }',
      ),
      { name: 2 },
    ],
    [
      'an inline fragment with no type condition',
      Book,
      selecting('{ book { ... { id } } }'),
      { id: 1 },
    ],
    [
      '@skip and @include as their literals say',
      Book,
      selecting(
        '{ book { id @skip(if: true) title @include(if: false) name @include(if: true) } }',
      ),
      { name: 1 },
    ],
    [
      "@skip and @include by the operation's variables, on fragments too",
      Book,
      selecting(
        'query ($no: Boolean!, $yes: Boolean!) { book { id @include(if: $no) ... @skip(if: $no) { title } ...B @include(if: $yes) } } fragment B on Book { name }',
        { no: false, yes: true },
      ),
      { title: 1, name: 1 },
    ],
  ])('collects %s', (_name, type, selection, fields) => {
    expect(named(type, selection)).toEqual(fields);
  });

  it('reads a type condition by name without the schema', () => {
    const selection = selecting('{ book { ... on Book { id } ... on Author { name } } }');
    expect([...selectedFields(graphql, undefined, Book, selection).keys()]).toEqual(['id']);
  });

  it("GraphQL's own fields only where asked (`own`), through named fragments too", () => {
    const selection = selecting('{ book { id ...B } } fragment B on Book { t: __typename }');
    expect([...selectedFields(graphql, schema, Book, selection).keys()]).toEqual(['id']);
    expect([...selectedFields(graphql, schema, Book, selection, true).keys()]).toEqual([
      'id',
      '__typename',
    ]);
  });
});

describe("subfieldKeys: an alias's sub-fields in the order GraphQL completes them", () => {
  it.each<
    [string, string, Record<string, unknown>, graphql.GraphQLObjectType | undefined, string[]]
  >([
    [
      'direct fields, names and aliases',
      '{ book { id t: title } }',
      {},
      Book,
      ['id', 'title', 't'],
    ],
    [
      'an inline fragment in place (adversary 96)',
      '{ book { id ... on Book { title } name } }',
      {},
      Book,
      ['id', 'title', 'name'],
    ],
    [
      'a fragment spread in place',
      '{ book { id ...B name } } fragment B on Book { title }',
      {},
      Book,
      ['id', 'title', 'name'],
    ],
    [
      'a fragment of another type: not collected',
      '{ book { id ... on Author { books { id } } name } }',
      {},
      Book,
      ['id', 'name'],
    ],
    [
      'the type not told: every fragment',
      '{ book { id ... on Author { books { id } } } }',
      {},
      undefined,
      ['id', 'books'],
    ],
    [
      '@include(if: false): left out',
      '{ book { id title @include(if: false) } }',
      {},
      Book,
      ['id'],
    ],
    [
      '@skip by a variable: left out',
      'query($s: Boolean!) { book { id title @skip(if: $s) name } }',
      { s: true },
      Book,
      ['id', 'name'],
    ],
    [
      '@include by a variable, true: kept',
      'query($i: Boolean!) { book { id title @include(if: $i) } }',
      { i: true },
      Book,
      ['id', 'title'],
    ],
  ])('%s', (_name, operation, variables, type, expected) => {
    const selection = selecting(operation, variables);
    expect(subfieldKeys(graphql, schema, type, selection.nodes[0], selection)).toEqual(expected);
  });
});
