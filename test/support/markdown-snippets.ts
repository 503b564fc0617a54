/** A page of the docs: its path from the repository's root, and its text. */
export interface Markdown {
  path: string;
  text: string;
}

/** Languages whose blocks must be snippet files: the code a reader copies into an app. */
const CHECKED = new Set(['ts', 'typescript', 'tsx', 'js', 'javascript', 'mts', 'cts']);

const MARKER = /^<!-- snippet: (\S+) -->$/;

/**
 * What is wrong with a page's code blocks, one line each: a block with no language (mark
 * prose-like code `text`), a TypeScript block with no snippet marker right above it, a marker
 * whose file is missing or differs from the block, a marker with no block under it. `read`
 * gives a snippet file's text, or undefined when there is none.
 */
export function codeBlockProblems(
  page: Markdown,
  read: (path: string) => string | undefined,
): string[] {
  const lines = page.text.split('\n');
  const problems: string[] = [];
  let marker: { file: string; line: number } | undefined;
  for (let index = 0; index < lines.length; index++) {
    const line = lines[index];
    const where = `${page.path}:${index + 1}`;
    const named = MARKER.exec(line.trim());
    if (named) {
      if (marker) problems.push(`${page.path}:${marker.line}: no code block under the marker`);
      marker = { file: named[1], line: index + 1 };
      continue;
    }
    const fence = /^```(\S*)/.exec(line);
    if (!fence) {
      if (marker && line.trim() !== '') {
        problems.push(`${page.path}:${marker.line}: no code block under the marker`);
        marker = undefined;
      }
      continue;
    }
    const end = lines.findIndex((candidate, at) => at > index && candidate.startsWith('```'));
    if (end < 0) {
      problems.push(`${where}: a code block that is never closed`);
      break;
    }
    const language = fence[1].toLowerCase();
    const body = lines.slice(index + 1, end).join('\n') + '\n';
    if (language === '') {
      problems.push(`${where}: a code block with no language (mark it, e.g. text or bash)`);
    } else if (marker) {
      const file = read(marker.file);
      if (file === undefined) problems.push(`${where}: ${marker.file} does not exist`);
      else if (file !== body) problems.push(`${where}: differs from ${marker.file}`);
    } else if (CHECKED.has(language)) {
      problems.push(
        `${where}: a ${language} block that is no snippet file (<!-- snippet: ... -->)`,
      );
    }
    marker = undefined;
    index = end;
  }
  if (marker) problems.push(`${page.path}:${marker.line}: no code block under the marker`);
  return problems;
}
