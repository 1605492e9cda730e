// One-time deprecation warnings (one per code and process), the way Node's own APIs warn.

const warned = new Set<string>();

/** Emits a DeprecationWarning with `code` the first time it is called for that code. */
export function deprecate(code: `LLAMUX_DEP_${string}`, message: string): void {
  if (warned.has(code)) return;
  warned.add(code);
  process.emitWarning(message, { type: 'DeprecationWarning', code });
}
