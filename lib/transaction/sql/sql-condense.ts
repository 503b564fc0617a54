/**
 * A long text with its repeated rows cut to one, before the parser reads it: an ORM's bulk
 * `INSERT` of ten thousand rows (`VALUES ($1, $2), ($3, $4), …`), an import of a hundred
 * thousand rows of literals in one text, or an `IN ($1, …, $30000)` took the parser from most
 * of a second to several, on the event loop, where no lease of the process is renewed.
 *
 * The cut must never change what the checks read: a `;`, a statement, a call and its
 * arguments, a setting. So it is made only where the text's lexical structure is plain enough
 * to be read exactly here: no backslash (no `E'…'` escape), no `U&`, no `$` but a parameter's
 * (no dollar-quoted body), no comment. There strings are `'…'` with `''` inside, quoted names
 * `"…"` with `""`, and the rows found after the keyword `VALUES` (or the list after `IN`) are
 * made of values only: literals, parameters, `NULL`, `DEFAULT`, `TRUE`, `FALSE`, with a plain
 * cast. What is cut holds nothing else; a text that is not plain is parsed whole.
 */
export function condensed(sql: string): string {
  if (/\\|--|\/\*|u&|\$(?!\d)/i.test(sql)) return sql;
  let out = '';
  let copied = 0;
  let i = 0;
  while (i < sql.length) {
    const c = sql[i];
    if (c === "'" || c === '"') {
      i = quotedEnd(sql, i);
    } else if (isLetter(c)) {
      const start = i;
      while (i < sql.length && (isLetter(sql[i]) || /[0-9$]/.test(sql[i]))) i++;
      const word = sql.slice(start, i).toLowerCase();
      // A keyword, not a name after a dot (`t.values`).
      if ((word !== 'values' && word !== 'in') || sql[spaceBefore(sql, start)] === '.') continue;
      const cut = word === 'values' ? moreRows(sql, i) : moreValues(sql, i);
      if (cut) {
        out += sql.slice(copied, cut.from);
        copied = cut.to;
        i = cut.to;
      }
    } else {
      i++;
    }
  }
  return copied === 0 ? sql : out + sql.slice(copied);
}

/** Where a `'…'` or `"…"` that opens at `at` ends (after its closing quote). */
function quotedEnd(sql: string, at: number): number {
  const quote = sql[at];
  let i = at + 1;
  while (i < sql.length) {
    if (sql[i] === quote && sql[i + 1] === quote) i += 2;
    else if (sql[i] === quote) return i + 1;
    else i++;
  }
  return i;
}

/**
 * A letter of a name as PostgreSQL's lexer reads one: ASCII letters, `_`, and any character
 * past ASCII (`évalues` is one name, and so is `values` with a no-break space after it).
 */
function isLetter(c: string): boolean {
  return /[A-Za-z_]/.test(c) || c.charCodeAt(0) >= 0x80;
}

/** PostgreSQL's white space: space, tab, newline, carriage return, form feed, vertical tab. */
function isSpace(c: string | undefined): boolean {
  return c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f' || c === '\v';
}

function skipSpace(sql: string, at: number): number {
  let i = at;
  while (i < sql.length && isSpace(sql[i])) i++;
  return i;
}

/** The index of the last character before `at` that is not space (-1 at the start). */
function spaceBefore(sql: string, at: number): number {
  let i = at - 1;
  while (i >= 0 && isSpace(sql[i])) i--;
  return i;
}

const VALUE_WORDS = new Set(['null', 'default', 'true', 'false']);

/** The end of one value at `at` (a literal, a parameter, a word of VALUE_WORDS), or -1. */
function valueEnd(sql: string, at: number): number {
  let i = at;
  if (sql[i] === "'") {
    i = quotedEnd(sql, i);
    if (sql[i - 1] !== "'" || i - 1 === at) return -1;
  } else if (sql[i] === '$') {
    i++;
    const digits = i;
    while (/\d/.test(sql[i] ?? '')) i++;
    if (i === digits) return -1;
  } else if (/[-\d]/.test(sql[i])) {
    const number = /^-?\d+(\.\d+)?(e[-+]?\d+)?/i.exec(sql.slice(i, i + 64));
    if (!number) return -1;
    i += number[0].length;
  } else {
    const word = /^[a-z]+/i.exec(sql.slice(i, i + 8))?.[0].toLowerCase() ?? '';
    if (!VALUE_WORDS.has(word)) return -1;
    i += word.length;
  }
  // A plain cast: `::jsonb`, `::text[]`.
  const cast = /^::[a-z_][a-z0-9_]*(\[\])?/i.exec(sql.slice(i, i + 72));
  if (cast) i += cast[0].length;
  const after = sql[i] ?? '';
  if (isLetter(after) || /[0-9$'"(.]/.test(after)) return -1;
  return i;
}

/** The ends of the values of a `( … )` at `at`, and where the row ends; undefined if not one. */
function row(sql: string, at: number): { ends: number[]; end: number } | undefined {
  if (sql[at] !== '(') return undefined;
  const ends: number[] = [];
  let i = at + 1;
  for (;;) {
    const end = valueEnd(sql, skipSpace(sql, i));
    if (end < 0) return undefined;
    ends.push(end);
    i = skipSpace(sql, end);
    if (sql[i] === ')') return { ends, end: i + 1 };
    if (sql[i] !== ',') return undefined;
    i++;
  }
}

/** After `VALUES` at `at`: the rows after the first, to cut. */
function moreRows(sql: string, at: number): { from: number; to: number } | undefined {
  const first = row(sql, skipSpace(sql, at));
  if (!first) return undefined;
  let to = first.end;
  for (;;) {
    const comma = skipSpace(sql, to);
    if (sql[comma] !== ',') break;
    const next = row(sql, skipSpace(sql, comma + 1));
    if (!next) break;
    to = next.end;
  }
  return to > first.end ? { from: first.end, to } : undefined;
}

/** After `IN` at `at`: the values of its list after the first, to cut. */
function moreValues(sql: string, at: number): { from: number; to: number } | undefined {
  const list = row(sql, skipSpace(sql, at));
  if (!list || list.ends.length < 2) return undefined;
  return { from: list.ends[0], to: list.end - 1 };
}
