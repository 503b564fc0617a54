/** Query parameters whose value is a secret: libpq's and node-postgres' names. */
const SECRET_PARAMETERS = new Set(['password', 'sslpassword']);
const HIDDEN = '***';

function decoded(text: string): string {
  try {
    return decodeURIComponent(text.replace(/\+/g, ' '));
  } catch {
    return text;
  }
}

/** `user:pass@` → `user:***@` in the authority (every host of a multi-host URL follows it). */
function redactUserInfo(url: string): string {
  const scheme = url.indexOf('://');
  if (scheme < 0) return url;
  const start = scheme + 3;
  const rest = url.slice(start);
  const end = rest.search(/[/?#]/);
  const authority = end < 0 ? rest : rest.slice(0, end);
  // The last '@' ends the user info: a password may hold a raw '@' (libpq takes it so).
  const at = authority.lastIndexOf('@');
  if (at < 0) return url;
  const userInfo = authority.slice(0, at);
  const colon = userInfo.indexOf(':');
  if (colon < 0) return url;
  const redacted = `${userInfo.slice(0, colon + 1)}${HIDDEN}${authority.slice(at)}`;
  return url.slice(0, start) + redacted + rest.slice(authority.length);
}

/** `?password=…`, `&password=…`, the name percent-encoded or not, in any case. */
function redactQuery(url: string): string {
  const question = url.indexOf('?');
  if (question < 0) return url;
  const hash = url.indexOf('#', question);
  const query = url.slice(question + 1, hash < 0 ? undefined : hash);
  const redacted = query
    .split('&')
    .map((pair) => {
      const equals = pair.indexOf('=');
      const name = equals < 0 ? pair : pair.slice(0, equals);
      return SECRET_PARAMETERS.has(decoded(name).trim().toLowerCase()) && equals >= 0
        ? `${name}=${HIDDEN}`
        : pair;
    })
    .join('&');
  return url.slice(0, question + 1) + redacted + (hash < 0 ? '' : url.slice(hash));
}

/** libpq's keyword form (`host=db password=secret`), which a user may pass as the URL too. */
const KEYWORD_PASSWORD = /\b(password|sslpassword)(\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)/gi;

/**
 * A connection string as the CLI may print it: every password hidden, whatever the form
 * (`user:pass@`, `?password=`, `&password=`, names or values percent-encoded, several hosts,
 * libpq's keywords). Text, not a parsed URL: a multi-host URL is no WHATWG URL, and what
 * cannot be parsed must still not be printed with its secret.
 */
export function redactConnectionString(url: string): string {
  const keyworded = url.includes('://') ? url : url.replace(KEYWORD_PASSWORD, `$1$2${HIDDEN}`);
  return redactQuery(redactUserInfo(keyworded));
}
