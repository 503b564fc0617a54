/** A name as an SQL statement takes it: quoted unless PostgreSQL would read it as written. */
export function sqlName(name: string): string {
  return /^[a-z_][a-z0-9_$]*$/.test(name) ? name : `"${name.replace(/"/g, '""')}"`;
}
