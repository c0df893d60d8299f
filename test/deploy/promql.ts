/**
 * Just enough of PromQL to list what an expression reads: its series selectors (metric
 * name and label matchers) and the label names of its grouping clauses. promtool checks
 * the syntax; this is for checking names against what Kiln exports.
 */

export interface Matcher {
  label: string;
  op: '=' | '!=' | '=~' | '!~';
  value: string;
}

export interface Selector {
  metric: string;
  matchers: Matcher[];
}

export interface ExprNames {
  selectors: Selector[];
  /** Labels named in by, without, on, ignoring, group_left and group_right. */
  groupingLabels: string[];
}

const AGGREGATIONS = new Set([
  'sum',
  'min',
  'max',
  'avg',
  'group',
  'stddev',
  'stdvar',
  'count',
  'count_values',
  'bottomk',
  'topk',
  'quantile',
  'limitk',
  'limit_ratio',
]);
const GROUPING = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right']);
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'atan2']);

type Token =
  | { kind: 'ident'; text: string }
  | { kind: 'string'; text: string }
  | { kind: 'punct'; text: string }
  | { kind: 'number'; text: string };

function tokenize(expr: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < expr.length) {
    const c = expr[i]!;
    if (/\s/.test(c)) {
      i += 1;
    } else if (c === '#') {
      while (i < expr.length && expr[i] !== '\n') i += 1;
    } else if (c === '"' || c === "'" || c === '`') {
      let text = '';
      i += 1;
      while (i < expr.length && expr[i] !== c) {
        if (expr[i] === '\\' && c !== '`') {
          text += expr[i + 1] ?? '';
          i += 2;
        } else {
          text += expr[i];
          i += 1;
        }
      }
      if (i >= expr.length) throw new Error(`unterminated string in ${expr}`);
      i += 1;
      tokens.push({ kind: 'string', text });
    } else if (c === '[') {
      // A range or a subquery: durations and Grafana variables, no names.
      const end = expr.indexOf(']', i);
      if (end < 0) throw new Error(`unterminated [ in ${expr}`);
      i = end + 1;
    } else if (/[0-9.]/.test(c)) {
      const match = /^[0-9.][0-9a-zA-Z.+]*/.exec(expr.slice(i))!;
      tokens.push({ kind: 'number', text: match[0] });
      i += match[0].length;
    } else if (/[a-zA-Z_:]/.test(c)) {
      const match = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(expr.slice(i))!;
      tokens.push({ kind: 'ident', text: match[0] });
      i += match[0].length;
    } else {
      const two = expr.slice(i, i + 2);
      const text = ['==', '!=', '<=', '>=', '=~', '!~'].includes(two) ? two : c;
      if (!'(){},+-*/%^<>=!@'.includes(text[0]!)) throw new Error(`unexpected ${JSON.stringify(c)} in ${expr}`);
      tokens.push({ kind: 'punct', text });
      i += text.length;
    }
  }
  return tokens;
}

export function exprNames(expr: string): ExprNames {
  const tokens = tokenize(expr);
  const selectors: Selector[] = [];
  const groupingLabels: string[] = [];
  const at = (k: number) => tokens[k];

  /** Reads `{ label op "value", ... }` from k (at the `{`); answers the matchers and the index after `}`. */
  const readMatchers = (k: number): [Matcher[], number] => {
    const matchers: Matcher[] = [];
    k += 1;
    while (at(k)?.text !== '}') {
      const label = at(k);
      const op = at(k + 1);
      const value = at(k + 2);
      if (label?.kind !== 'ident' || op?.kind !== 'punct' || value?.kind !== 'string') {
        throw new Error(`malformed label matcher in ${expr}`);
      }
      if (!['=', '!=', '=~', '!~'].includes(op.text)) throw new Error(`bad matcher operator ${op.text} in ${expr}`);
      matchers.push({ label: label.text, op: op.text as Matcher['op'], value: value.text });
      k += 3;
      if (at(k)?.text === ',') k += 1;
      if (k >= tokens.length) throw new Error(`unterminated { in ${expr}`);
    }
    return [matchers, k + 1];
  };

  for (let k = 0; k < tokens.length;) {
    const token = tokens[k]!;
    if (token.kind === 'ident' && GROUPING.has(token.text)) {
      k += 1;
      if (at(k)?.text !== '(') continue; // group_left without labels
      k += 1;
      while (at(k)?.text !== ')') {
        const label = at(k);
        if (label?.kind === 'ident') groupingLabels.push(label.text);
        else if (label?.text !== ',') throw new Error(`malformed grouping clause in ${expr}`);
        k += 1;
      }
      k += 1;
    } else if (token.kind === 'ident' && (AGGREGATIONS.has(token.text) || KEYWORDS.has(token.text))) {
      k += 1;
    } else if (token.kind === 'ident' && at(k + 1)?.text === '(') {
      k += 1; // a function call
    } else if (token.kind === 'ident') {
      let matchers: Matcher[] = [];
      k += 1;
      if (at(k)?.text === '{') [matchers, k] = readMatchers(k);
      selectors.push({ metric: token.text, matchers });
    } else if (token.text === '{') {
      const [matchers, next] = readMatchers(k);
      const name = matchers.find((m) => m.label === '__name__' && m.op === '=');
      if (name === undefined) throw new Error(`a selector without a metric name in ${expr}`);
      selectors.push({ metric: name.value, matchers: matchers.filter((m) => m !== name) });
      k = next;
    } else {
      k += 1;
    }
  }
  return { selectors, groupingLabels };
}

/** The words of a regular expression that is a plain alternation (`a|b|c`), else null. */
export function alternatives(regex: string): string[] | null {
  return /^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$/.test(regex) ? regex.split('|') : null;
}
