import { codeBlockProblems } from './markdown-snippets.js';

const files: Record<string, string> = { 'docs/snippets/a.ts': 'export const a = 1;\n' };
const read = (path: string) => files[path];
const check = (text: string) => codeBlockProblems({ path: 'x.md', text }, read);

describe('codeBlockProblems', () => {
  it.each([
    [
      'a marked block equal to its file',
      '<!-- snippet: docs/snippets/a.ts -->\n```ts\nexport const a = 1;\n```\n',
      [],
    ],
    [
      'a blank line between marker and block',
      '<!-- snippet: docs/snippets/a.ts -->\n\n```ts\nexport const a = 1;\n```\n',
      [],
    ],
    ['a bash block', '```bash\nnpm test\n```\n', []],
    ['a mermaid block', '```mermaid\nflowchart LR\n```\n', []],
    [
      'a ts block without a marker',
      '```ts\nconst b = 2;\n```\n',
      ['x.md:1: a ts block that is no snippet file (<!-- snippet: ... -->)'],
    ],
    [
      'a typescript block without a marker',
      'text\n```typescript\nconst b = 2;\n```\n',
      ['x.md:2: a typescript block that is no snippet file (<!-- snippet: ... -->)'],
    ],
    [
      'a block with no language',
      '```\nconst b = 2;\n```\n',
      ['x.md:1: a code block with no language (mark it, e.g. text or bash)'],
    ],
    [
      'a block that differs from its file',
      '<!-- snippet: docs/snippets/a.ts -->\n```ts\nexport const a = 2;\n```\n',
      ['x.md:2: differs from docs/snippets/a.ts'],
    ],
    [
      'a marker whose file is missing',
      '<!-- snippet: docs/snippets/b.ts -->\n```ts\nx\n```\n',
      ['x.md:2: docs/snippets/b.ts does not exist'],
    ],
    [
      'a marker followed by prose',
      '<!-- snippet: docs/snippets/a.ts -->\nprose\n',
      ['x.md:1: no code block under the marker'],
    ],
    [
      'a marker at the end',
      'prose\n<!-- snippet: docs/snippets/a.ts -->\n',
      ['x.md:2: no code block under the marker'],
    ],
    ['a block never closed', '```bash\nnpm test\n', ['x.md:1: a code block that is never closed']],
  ])('%s', (_name, text, problems) => {
    expect(check(text)).toEqual(problems);
  });
});
