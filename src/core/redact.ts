/**
 * Keeps credentials out of messages and logs. Settings hold them in URLs (`redis://user:PASS@h`),
 * in REDIS_AUTH, and in OTLP headers; messages about a bad setting quote the setting.
 */

/** The text with the password of every `scheme://user:password@` in it replaced by `***`. */
export function redactUrls(text: string): string {
  // Greedy within the authority: a password holding a raw '@' is hidden whole.
  return text.replace(/(\/\/[^/@:\s',[]*:)[^/\s'[\]]*@/g, '$1***@');
}

/** Every credential in these settings, as written and percent-decoded, for `redactSecrets`. */
export function secretsIn(env: Record<string, string | undefined>): string[] {
  const secrets = new Set<string>();
  const add = (secret: string | undefined) => {
    if (secret === undefined || secret.length < 3) return;
    secrets.add(secret);
    try {
      secrets.add(decodeURIComponent(secret));
    } catch {
      // Not percent-encoded: the raw form is enough.
    }
  };
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) continue;
    if (name === 'REDIS_AUTH') {
      add(value);
      add(value.slice(value.indexOf(':') + 1));
    }
    if (/_URL$|_ENDPOINT$/.test(name)) {
      for (const [, password] of value.matchAll(/\/\/[^/@:\s]*:([^/\s]*)@/g)) add(password);
    }
    if (/_HEADERS$/.test(name)) {
      for (const pair of value.split(',')) add(pair.slice(pair.indexOf('=') + 1).trim());
    }
  }
  // Longest first, so that a secret holding another is hidden whole.
  return [...secrets].sort((a, b) => b.length - a.length);
}

/** The text with every one of `secrets` replaced by `***`, and URL passwords too. */
export function redactSecrets(text: string, secrets: readonly string[]): string {
  let redacted = redactUrls(text);
  for (const secret of secrets) redacted = redacted.split(secret).join('***');
  return redacted;
}
