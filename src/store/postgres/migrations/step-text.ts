/**
 * The text of an earlier step, rewritten: a step that replaces a function an earlier
 * step made starts from that step's text, so the function it writes differs from the
 * one before only where it says.
 */

/** `text` with each `from` (which it must hold exactly once) replaced by its `to`, as it reads (a `$$` stays two); `step` names the step in errors. */
export function rewritten(step: string, text: string, rewrites: [from: string, to: string][]): string {
  let result = text;
  for (const [from, to] of rewrites) {
    if (result.split(from).length !== 2) throw new Error(`migration ${step}: expected one ${JSON.stringify(from)}`);
    result = result.replace(from, () => to);
  }
  return result;
}

/**
 * The text of one function an earlier step created or replaced, from its CREATE to the
 * first `close` after it (by default a `$$;` on a line of its own; `END $$;\n` for a body
 * that ends on its END line).
 */
export function functionOf(step: string, text: string, create: string, close = '\n$$;\n'): string {
  const start = text.indexOf(create);
  const end = text.indexOf(close, start);
  if (start < 0 || end < 0) throw new Error(`migration ${step}: no ${JSON.stringify(create)} in the step it rewrites`);
  return text.slice(start, end + close.length);
}
