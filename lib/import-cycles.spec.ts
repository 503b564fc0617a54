import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Layers point down (STYLE.md): a type that two files share sits below both, so no file of the
 * library reaches itself through its imports, type imports included. A loop is where a shared
 * shape was left in one of its users; this names the loop so that the shape can be moved down.
 */
const root = dirname(fileURLToPath(import.meta.url));

function sources(folder: string): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts') ? [path] : [];
  });
}

function importGraph(files: string[]): Map<string, string[]> {
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    const targets = [...text.matchAll(/from '(\.{1,2}\/[^']+)\.js'/g)]
      .map((match) => normalize(join(dirname(file), `${match[1]}.ts`)))
      .filter((target) => known.has(target));
    graph.set(file, targets);
  }
  return graph;
}

/** The loops of the graph (its strongly connected parts of more than one file). */
function loops(graph: Map<string, string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (file: string) => {
    index.set(file, index.size);
    low.set(file, index.get(file)!);
    stack.push(file);
    onStack.add(file);
    for (const next of graph.get(file) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(file, Math.min(low.get(file)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(file, Math.min(low.get(file)!, index.get(next)!));
      }
    }
    if (low.get(file) !== index.get(file)) return;
    const part: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      part.push(relative(root, member));
    } while (member !== file);
    if (part.length > 1) found.push(part.sort());
  };
  for (const file of graph.keys()) if (!index.has(file)) visit(file);
  return found;
}

describe('the library’s imports', () => {
  it('finds a loop when there is one (the check itself)', () => {
    const graph = new Map([
      ['/a.ts', ['/b.ts']],
      ['/b.ts', ['/c.ts']],
      ['/c.ts', ['/a.ts']],
      ['/d.ts', ['/a.ts']],
    ]);
    expect(loops(graph)).toHaveLength(1);
    expect(loops(graph)[0]).toHaveLength(3);
  });

  it('have no loops, type imports included', () => {
    expect(loops(importGraph(sources(root)))).toEqual([]);
  });
});
